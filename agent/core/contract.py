"""The event identity contract as plain functions (docs/contract.md).

Pure: no I/O, no clock. Everything that decides what "the same event" means
lives here or in `agent.core.jcs`, so that it can be pinned by table tests:

* ids (`source`, `transitionId`, `bootId`) are text; a JSON integer is taken
  as its decimal text (`91` == `"91"`, `"091"` is another id). Text is kept
  exactly as given: no trimming, no case folding, no Unicode normalisation,
  because a PLC that sends `" T1"` and `"T1"` sent two different ids.
* timestamps are RFC 3339 with an offset, normalised to a UTC instant with
  millisecond precision (finer digits truncated, never rounded).
* `payload_hash` is SHA-256 over canonical JSON of payload + source time.
* the identity key is (source, transitionId, bootId) and nothing else.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import quote

from agent.core.basis import IdentityBasis
from agent.core.jcs import canonical_json, json_string


class Decision(StrEnum):
    """What the store decided about one delivery (exactly one per delivery)."""

    INSERTED = "inserted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    IDENTITY_INCOMPLETE = "identity_incomplete"
    REJECTED = "rejected"


class Status(StrEnum):
    """Status of a canonical event."""

    CANONICAL = "Canonical"
    DUPLICATE_CONFLICT = "DuplicateConflict"


class ContractError(ValueError):
    """A value breaks the contract; the message is the `reason` recorded for a rejection."""


class Key(NamedTuple):
    """The identity of a source event. Three separate texts, never joined.

    A named tuple: the store hashes and compares keys several times per delivery, and a
    tuple's hash and equality run in C (a dataclass's in Python)."""

    source: str
    transition_id: str
    boot_id: str

    @property
    def device(self) -> str:
        return device_of(self.source)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of an event, already normalised, ready for the store.

    `key` is None when the identity is incomplete (`missing` names what is
    missing). `live` is False for entries read from a device's ring buffer
    (buffered data); it only matters for BootObserved's `previous_bootId`.
    `source`, `transition_id` and `boot_id` keep whatever parts were present,
    as evidence, also when the key is incomplete. `basis` says where the
    transitionId came from (`agent.core.basis`): never part of the identity.
    """

    source: str | None
    transition_id: str | None
    boot_id: str | None
    source_timestamp: str | None
    arrival_at: str
    payload: dict[str, Any]
    payload_hash: str
    raw: str | bytes
    receiver: str
    live: bool = True
    line: int | None = None
    missing: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    payload_json: str = ""
    basis: str = IdentityBasis.COUNTER
    via: str | None = None  # OPC UA alarms: "live" or "refresh" (contract 7); None for the rest
    key: Key | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # Computed once: the store looks at keys several times per batch.
        complete = self.source and self.transition_id and self.boot_id
        key = Key(self.source, self.transition_id, self.boot_id) if complete else None  # type: ignore[arg-type]
        object.__setattr__(self, "key", key)
        if not self.payload_json:
            object.__setattr__(self, "payload_json", canonical_json(self.payload))


# Delivery's slots in order; `imported_delivery` sets each one and breaks loudly if one is added.
_DELIVERY_SLOTS = (
    "source",
    "transition_id",
    "boot_id",
    "source_timestamp",
    "arrival_at",
    "payload",
    "payload_hash",
    "raw",
    "receiver",
    "live",
    "line",
    "missing",
    "evidence",
    "payload_json",
    "basis",
    "via",
    "key",
)
assert Delivery.__slots__ == _DELIVERY_SLOTS, "imported_delivery must set every slot of Delivery"
(
    _set_source,
    _set_transition_id,
    _set_boot_id,
    _set_source_timestamp,
    _set_arrival_at,
    _set_payload,
    _set_payload_hash,
    _set_raw,
    _set_receiver,
    _set_live,
    _set_line,
    _set_missing,
    _set_evidence,
    _set_payload_json,
    _set_basis,
    _set_via,
    _set_key,
) = (Delivery.__dict__[name].__set__ for name in _DELIVERY_SLOTS)
_new = object.__new__
_COUNTER = IdentityBasis.COUNTER


def imported_delivery(
    source: str | None,
    transition_id: str | None,
    boot_id: str | None,
    source_timestamp: str | None,
    arrival_at: str,
    payload: dict[str, Any],
    payload_hash: str,
    raw: str | bytes,
    receiver: str,
    line: int | None,
    missing: tuple[str, ...],
    evidence: dict[str, Any],
    payload_json: str,
) -> Delivery:
    """`Delivery(...)` of a live line with its canonical JSON already made (basis counter, no
    `via`), the same object, built by setting its slots directly: the dataclass's own
    `__init__` (keywords, 17 `object.__setattr__` calls, `__post_init__`) took 2.4 us of the
    importer's 9 us a line, this about 0.9 us (tests/unit/test_contract.py compares them)."""
    d = _new(Delivery)
    _set_source(d, source)
    _set_transition_id(d, transition_id)
    _set_boot_id(d, boot_id)
    _set_source_timestamp(d, source_timestamp)
    _set_arrival_at(d, arrival_at)
    _set_payload(d, payload)
    _set_payload_hash(d, payload_hash)
    _set_raw(d, raw)
    _set_receiver(d, receiver)
    _set_live(d, True)
    _set_line(d, line)
    _set_missing(d, missing)
    _set_evidence(d, evidence)
    _set_payload_json(d, payload_json or canonical_json(payload))
    _set_basis(d, _COUNTER)
    _set_via(d, None)
    _set_key(d, Key(source, transition_id, boot_id) if source and transition_id and boot_id else None)
    return d


@dataclass(frozen=True, slots=True)
class Rejection:
    """A delivery that could not be parsed. Its raw bytes are kept with the reason."""

    raw: str | bytes
    reason: str
    arrival_at: str
    receiver: str
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A gap (missed transitions) or a counter anomaly (wrap, reset, ring overrun) of one channel.

    `first` and `last` name the missing range (gap, overrun) or the old and
    new counter values (wrap, reset). Nothing is ever invented for a gap.
    """

    source: str
    boot_id: str
    kind: str  # "gap" | "wrap" | "reset" | "overrun"
    first: str
    last: str
    detected_at: str
    evidence: dict[str, Any] = field(default_factory=dict)


ANOMALY_KINDS = ("gap", "wrap", "reset", "overrun", "absent_at_refresh")


# --- ids -------------------------------------------------------------------


def normalize_id(value: Any, name: str) -> str | None:
    """Text form of an id, or None when missing/null/empty.

    Raises ContractError for a value that is neither text nor an integer
    (booleans, floats, objects, lists): such a delivery is `rejected`.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ContractError(f"{name} must be text or an integer, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise ContractError(f"{name} holds a lone UTF-16 surrogate, which is not valid Unicode")
        return value or None
    raise ContractError(f"{name} must be text or an integer, got {_json_type(value)}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def device_of(source: str) -> str:
    """The device is the text before the first `/` (the whole source when there is none)."""
    return source.split("/", 1)[0]


def channel_of(source: str) -> str | None:
    """The channel is the text after the first `/`, or None when the source has no `/`."""
    parts = source.split("/", 1)
    return parts[1] if len(parts) == 2 else None


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", float: "a number with a fraction"}.get(
        type(value), type(value).__name__
    )


# --- time ------------------------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def parse_timestamp(text: Any, name: str) -> datetime:
    """Parse RFC 3339 with an offset into an aware UTC datetime, truncated to milliseconds."""
    if not isinstance(text, str):
        raise ContractError(f"{name} must be an RFC 3339 text with offset, got {_json_type(text)}")
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ContractError(f"{name} {text!r} is not RFC 3339 with offset (e.g. 2026-04-22T08:00:12.120Z)")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    millis = int((m.group(7) or "0")[:3].ljust(3, "0"))
    if m.group(8):
        tz = UTC
    else:
        off_h, off_m = int(m.group(10)), int(m.group(11))
        if off_h > 23 or off_m > 59:
            raise ContractError(f"{name} {text!r} has an impossible UTC offset")
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=off_h, minutes=off_m))
    try:
        # A leap second (:60) cannot be held by datetime; it is a real but rare
        # RFC 3339 value, so it is taken as the last millisecond of that minute.
        if second == 60:
            dt = datetime(year, month, day, hour, minute, 59, 999_000, tzinfo=tz)
        else:
            dt = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
        return dt.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ContractError(f"{name} {text!r} is not a valid date and time: {exc}") from exc


def format_timestamp(dt: datetime) -> str:
    """RFC 3339 UTC with milliseconds: `2026-04-22T08:00:12.180Z`."""
    if dt.tzinfo is None:
        raise ValueError("naive datetimes are not instants")
    u = dt.astimezone(UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f".{u.microsecond // 1000:03d}Z"
    )


def normalize_timestamp(text: Any, name: str) -> str | None:
    """Normalised text of an optional timestamp (None stays None)."""
    if text is None:
        return None
    # Already in normal form (the common case), every field in its range: only a day past the
    # 28th, or the year 0000, needs the date's own check (dates repeat: it is cached). Else the
    # full parse, for the message (or the leap second rule).
    if (
        type(text) is str
        and _NORMAL_RANGED.fullmatch(text) is not None
        and ((text[8:10] <= "28" and not text.startswith("0000")) or _date_exists(text[:10]))
    ):
        return text
    return format_timestamp(parse_timestamp(text, name))


_NORMAL_RANGED = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)


@lru_cache(maxsize=4096)
def _date_exists(date: str) -> bool:
    """`YYYY-MM-DD` (digits) names a day of the calendar."""
    try:
        datetime(int(date[:4]), int(date[5:7]), int(date[8:10]))
    except ValueError:
        return False
    return True


# --- content ---------------------------------------------------------------


def payload_hash(payload: dict[str, Any], source_timestamp: str | None) -> str:
    """SHA-256 (hex) of canonical JSON of {"payload": ..., "sourceTimestamp": ...}.

    `source_timestamp` must already be normalised. Raises `CanonicalJsonError`
    (a ValueError) for content with no canonical form.
    """
    return payload_hash_of_text(canonical_json(payload), source_timestamp)


def payload_hash_of_text(payload_json: str, source_timestamp: str | None) -> str:
    """The same hash from the payload's canonical JSON text (computed once, also stored)."""
    ts = "null" if source_timestamp is None else json_string(source_timestamp)
    # "payload" sorts before "sourceTimestamp", so this is the canonical form of the pair.
    text = f'{{"payload":{payload_json},"sourceTimestamp":{ts}}}'
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- CloudEvents ------------------------------------------------------------

TRANSITION_TYPE = "io.edgeagent.transition"
BOOT_OBSERVED_TYPE = "io.edgeagent.boot_observed"
GAP_TYPE = "io.edgeagent.gap"
ANOMALY_TYPE = "io.edgeagent.anomaly"
IDENTITY_INCOMPLETE_TYPE = "io.edgeagent.identity_incomplete"

_SITE = re.compile(r"[A-Za-z0-9._~:/-]+")


_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")


def pct(text: str) -> str:
    """Percent-encode every UTF-8 byte outside `A-Z a-z 0-9 - . _ ~`."""
    if _UNRESERVED.fullmatch(text):
        return text  # nothing to encode (the common case: ids and names of plain letters and digits)
    return quote(text, safe="", encoding="utf-8")


def check_site(site: str) -> str:
    if not _SITE.fullmatch(site):
        raise ContractError(f"site {site!r} must match [A-Za-z0-9._~:/-]+")
    return site


def ce_source(site: str, source: str) -> str:
    """CloudEvents `source` of a transition: `<site>/pct(device)/pct(channel)`.

    A source without `/` is a device with no channel: `<site>/pct(device)`,
    so that `dev` and `dev/` never meet.
    """
    channel = channel_of(source)
    base = f"{check_site(site)}/{pct(device_of(source))}"
    return base if channel is None else f"{base}/{pct(channel)}"


def ce_device_source(site: str, device: str) -> str:
    return f"{check_site(site)}/{pct(device)}"


def ce_transition_id(key: Key) -> str:
    """`pct(bootId):pct(transitionId)`; the `:` inside either part is encoded, so it is unambiguous."""
    return f"{pct(key.boot_id)}:{pct(key.transition_id)}"


def ce_anomaly_id(kind: str, boot_id: str, first: str, last: str) -> str:
    """Id of a gap/wrap/reset/overrun record: `kind:pct(boot):pct(first):pct(last)`."""
    return f"{kind}:{pct(boot_id)}:{pct(first)}:{pct(last)}"


def idempotency_key(ce_source_text: str, ce_id: str) -> str:
    """HTTP `Idempotency-Key`: lowercase hex SHA-256 of source + newline + id."""
    return hashlib.sha256(f"{ce_source_text}\n{ce_id}".encode()).hexdigest()

"""The event identity contract as plain functions (docs/contract.md).

Pure: no I/O, no clock. Everything that decides what "the same event" means
lives here or in `agent.core.jcs`, so that it can be pinned by table tests:

* ids (`source`, `transitionId`, `bootId`) are text; a JSON integer is taken
  as its decimal text (`91` == `"91"`, `"091"` is another id). Text is kept
  exactly as given: no trimming, no case folding, no Unicode normalisation,
  because a PLC that sends `" T1"` and `"T1"` sent two different ids.
* timestamps are RFC 3339 with an offset, normalised to a UTC instant with
  millisecond precision (finer digits truncated, never rounded): `agent.core.timestamps`.
* `payload_hash` is SHA-256 over canonical JSON of payload + source time.
* the identity key is (source, transitionId, bootId) and nothing else.

The CloudEvents names built from a key (types, `source`, `id`, `Idempotency-Key`) are
`agent.core.cloudevent_ids`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from agent.core.basis import IdentityBasis
from agent.core.jcs import canonical_json, json_string


class Decision(StrEnum):
    """What the store decided about one delivery (exactly one per delivery)."""

    INSERTED = "inserted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    IDENTITY_INCOMPLETE = "identity_incomplete"
    REJECTED = "rejected"
    # The ledger only: a key with no identity whose event time is older than the identity horizon
    # (ledger.md "Retention and the identity horizon"); the SQLite store never makes it.
    BEYOND_HORIZON = "beyond_horizon"


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
    return _built(
        source, transition_id, boot_id, source_timestamp, arrival_at, payload, payload_hash, raw,
        receiver, True, line, missing, evidence, payload_json, _COUNTER,
    )  # fmt: skip


def _built(
    source: Any,
    transition_id: Any,
    boot_id: Any,
    source_timestamp: Any,
    arrival_at: str,
    payload: dict[str, Any],
    payload_hash: str,
    raw: Any,
    receiver: str,
    live: bool,
    line: int | None,
    missing: tuple[str, ...],
    evidence: dict[str, Any],
    payload_json: str,
    basis: Any,
) -> Delivery:
    """The Delivery of these values, its slots set directly (no `via`; a key when all three parts are)."""
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
    _set_live(d, live)
    _set_line(d, line)
    _set_missing(d, missing)
    _set_evidence(d, evidence)
    _set_payload_json(d, payload_json or canonical_json(payload))
    _set_basis(d, basis)
    _set_via(d, None)
    _set_key(d, Key(source, transition_id, boot_id) if source and transition_id and boot_id else None)
    return d


def polled_delivery(
    source: str,
    transition_id: str,
    boot_id: str | None,
    source_timestamp: str | None,
    arrival_at: str,
    payload: dict[str, Any],
    payload_hash: str,
    raw: str,
    receiver: str,
    live: bool,
    missing: tuple[str, ...],
    evidence: dict[str, Any],
    payload_json: str,
    basis: str,
) -> Delivery:
    """`Delivery(...)` of a poller's read (`agent.core.snapshot.make_delivery`: no line, no `via`,
    its canonical JSON made), the same object built by setting its slots as `imported_delivery`
    does (tests/unit/test_contract.py compares them)."""
    return _built(
        source, transition_id, boot_id, source_timestamp, arrival_at, payload, payload_hash, raw,
        receiver, live, None, missing, evidence, payload_json, basis,
    )  # fmt: skip


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
    raise ContractError(f"{name} must be text or an integer, got {json_type_name(value)}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def device_of(source: str) -> str:
    """The device is the text before the first `/` (the whole source when there is none)."""
    return source.split("/", 1)[0]


def channel_of(source: str) -> str | None:
    """The channel is the text after the first `/`, or None when the source has no `/`."""
    parts = source.split("/", 1)
    return parts[1] if len(parts) == 2 else None


def json_type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", float: "a number with a fraction"}.get(
        type(value), type(value).__name__
    )


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

"""What a read of a controller is, and what the tracker makes of it (pure types and helpers).

Holds the snapshot a source reads (channels, ring, boot evidence), the observations the
tracker returns, and the small conversions both sides share. No I/O, no clock, no state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from agent.core.basis import IdentityBasis
from agent.core.contract import Anomaly, Delivery, payload_hash_of_text, polled_delivery
from agent.core.decide import BootSighting
from agent.core.jcs import canonical_json
from agent.core.timestamps import format_timestamp


@dataclass(frozen=True, slots=True)
class ChannelRead:
    """One channel as read. ``transition_id`` None with ``error`` set: the read of it failed.

    ``window_ms`` is set for a channel without a counter that opted in to window keys
    (``identity: window``); its ``transition_id`` is None and the tracker makes the key
    (:mod:`agent.core.window`) from the state when it changes.
    """

    channel: str
    transition_id: int | None
    state: Any = None
    source_timestamp: str | None = None
    latched: Mapping[str, Any] = field(default_factory=dict)
    bits: int = 32
    error: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    window_ms: int | None = None


@dataclass(frozen=True, slots=True)
class RingItem:
    """One ring slot as read; ``boot_id`` None when the entry carries none (0 or unmapped)."""

    seq: int
    channel: str | None
    transition_id: int
    boot_id: str | None
    state: Any
    source_timestamp: str | None
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RingRead:
    """The ring as read: its head counter, its capacity and the entries of its slots."""

    head: int
    capacity: int
    entries: tuple[RingItem, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent read of a device over one connection.

    ``boot_reads`` are every value the boot id had during the read (one request: one value;
    otherwise before and after); they differ when the controller restarted mid-read.
    ``boot_where`` names the register or node (evidence). ``start_time`` is OPC UA
    ``ServerStatus/StartTime`` (normalised text) or None.
    """

    device: str
    receiver: str
    read_at: str
    boot_id: str | None
    channels: tuple[ChannelRead, ...]
    boot_reads: tuple[str | None, ...] = ()
    boot_where: Mapping[str, Any] = field(default_factory=dict)
    boot_error: str | None = None
    start_time: str | None = None
    ring: RingRead | None = None
    ring_error: str | None = None


@dataclass(frozen=True, slots=True)
class Positions:
    """Where a tracker stands after a read, for the store to record with that read's deliveries.

    ``channels``: channel -> last transitionId read in ``boot`` (only those that moved);
    ``ring_head``: the ring head read, when it moved. A restarted agent resumes from these.
    """

    device: str
    boot: str | None
    channels: Mapping[str, int] = field(default_factory=dict)
    ring_head: int | None = None


@dataclass(frozen=True, slots=True)
class Observations:
    """What one snapshot adds: deliveries (ring entries first, oldest first), boots, anomalies,
    and the tracker positions they move (recorded in the same transaction)."""

    deliveries: tuple[Delivery, ...] = ()
    boots: tuple[BootSighting, ...] = ()
    anomalies: tuple[Anomaly, ...] = ()
    torn: bool = False
    notes: tuple[str, ...] = ()
    positions: Positions | None = None

    def __bool__(self) -> bool:
        return bool(self.deliveries or self.boots or self.anomalies or self.positions)


_EPOCH = datetime(1970, 1, 1)


# A channel's time register repeats from poll to poll; typed, so True (no time) is never taken for 1.
@lru_cache(maxsize=4096, typed=True)
def time_text(value: int | float, unit: str = "ms", clock: str = "UTC") -> str | None:
    """A PLC time value (ms or s since the Unix epoch, in UTC or a local zone) as contract text.

    0 means "never" on a PLC and gives None, and so does a value that is no time (NaN, Inf, or
    outside the years 1..9999, such as a 64-bit register of all ones). A local clock is read as
    wall time in that zone (as a PLC without time zone support stores it) and converted to UTC.
    """
    if not value or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return None  # NaN/Inf (a float register of all ones) is no time; the caller flags it
    try:
        ms = int(value * 1000) if unit == "s" else int(value)
        wall = _EPOCH + timedelta(milliseconds=ms)
        aware = wall.replace(tzinfo=UTC) if clock == "UTC" else wall.replace(tzinfo=ZoneInfo(clock))
        return format_timestamp(aware)
    except (OverflowError, ValueError):  # beyond year 1..9999, e.g. a uint64 of all ones
        return None


def state_name(raw: Any, values: Mapping[int, str]) -> Any:
    """The configured name of a state value, or the raw value when none is configured."""
    return values.get(raw, raw) if isinstance(raw, int) else raw


def is_wrap(old: int, new: int, bits: int) -> bool:
    """A step back from the top quarter of the counter's range to its bottom quarter."""
    span: int = 2**bits
    return old >= span - span // 4 and new < span // 4


def boot_raw(snap: Snapshot) -> dict[str, Any]:
    """How this poll read the boot id (its value and register or node, or the error): the `boot`
    part of a live delivery's evidence."""
    raw: dict[str, Any] = {"value": snap.boot_id, **snap.boot_where}
    if snap.boot_error:
        raw["error"] = snap.boot_error
    return raw


def live_delivery(
    device: str,
    ch: ChannelRead,
    snap: Snapshot,
    transition_id: int | str,
    raw: Mapping[str, Any],
    basis: str = IdentityBasis.COUNTER,
) -> Delivery:
    """The delivery of what one poll read now on channel `ch` (live, at the poll's time)."""
    return make_delivery(
        device=device,
        channel=ch.channel,
        transition_id=transition_id,
        boot_id=snap.boot_id,
        state=ch.state,
        source_timestamp=ch.source_timestamp,
        latched=ch.latched,
        arrival_at=snap.read_at,
        receiver=snap.receiver,
        live=True,
        raw=raw,
        basis=basis,
    )


def make_delivery(
    *,
    device: str,
    channel: str,
    transition_id: int | str,
    boot_id: str | None,
    state: Any,
    source_timestamp: str | None,
    latched: Mapping[str, Any],
    arrival_at: str,
    receiver: str,
    live: bool,
    raw: Mapping[str, Any],
    basis: str = IdentityBasis.COUNTER,
) -> Delivery:
    """A poller's delivery: payload is exactly ``{"state": ...}`` plus latched fields (contract 1)."""
    payload = {**latched, "state": state}
    payload_json = canonical_json(payload)  # once: the hash and the stored payload are made from it
    evidence, evidence_json = evidence_of(raw)
    return polled_delivery(
        f"{device}/{channel}",
        str(transition_id),
        boot_id,
        source_timestamp,
        arrival_at,
        payload,
        payload_hash_of_text(payload_json, source_timestamp),
        evidence_json,
        receiver,
        live,
        () if boot_id else ("bootId",),
        evidence,
        payload_json,
        basis,
    )


def evidence_of(raw: Mapping[str, Any]) -> tuple[Any, str]:
    """A read's evidence as strict JSON and its text: :func:`evidence_reference`'s result.

    The common evidence (dicts with printable-ASCII text keys, lists and tuples, printable-ASCII
    text, integers, booleans, null: what a register read is made of) is copied by
    :func:`_plain_simple` and written by orjson with sorted keys, which then writes exactly what
    json.dumps does (same escapes for printable ASCII, code-point order of ASCII keys); orjson
    refuses integers beyond 64 bits and deep nesting. Anything else takes the reference."""
    try:
        evidence = _plain_simple(raw)
        return evidence, orjson.dumps(evidence, option=_SORTED).decode()
    except (_NotSimple, orjson.JSONEncodeError):
        return evidence_reference(raw)


def evidence_reference(raw: Mapping[str, Any]) -> tuple[Any, str]:
    """The evidence (:func:`_plain`) and its text through json.dumps with sorted keys."""
    evidence = _plain(raw)
    return evidence, _evidence_json(evidence)


_SORTED = orjson.OPT_SORT_KEYS


class _NotSimple(Exception):
    """The evidence holds something other than dicts, lists, printable ASCII, ints, booleans, null."""


def _plain_simple(value: Any) -> Any:
    """:func:`_plain` of evidence made only of the plain types above; raises _NotSimple otherwise."""
    kind = type(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is str:
        if value.isascii() and value.isprintable():
            return value
        raise _NotSimple
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str or not (k.isascii() and k.isprintable()):
                raise _NotSimple
            out[k] = _plain_simple(v)
        return out
    if kind is list or kind is tuple:
        if _NUMBERS.issuperset(map(type, value)):  # registers: one C-level look at their types
            return list(value)
        return [_plain_simple(v) for v in value]
    raise _NotSimple


_NUMBERS = frozenset((int, bool, type(None)))


# json.dumps(evidence, sort_keys=True, default=str, separators=(",", ":"), allow_nan=False) with
# its encoder made once: json.dumps builds a JSONEncoder on every call given any option.
_evidence_json = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"), allow_nan=False).encode


def _plain(value: Any) -> Any:
    """Evidence as strict JSON: NaN and Inf (e.g. a float register of all ones) as text.

    The plain types a read is made of are told by their exact type (an ABC check per value
    was most of the cost of a delivery); anything else takes :func:`_plain_general`."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): _plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    if kind is float:
        return value if math.isfinite(value) else str(value)
    return _plain_general(value)


def _plain_general(value: Any) -> Any:
    """:func:`_plain` for any value: subclasses and other mappings and sequences included."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value

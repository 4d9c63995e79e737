"""From successive controller snapshots to observations (pure: no I/O, no clock, no asyncio).

A source reads a device (one consistent :class:`Snapshot`) and hands it to the
:class:`DeviceTracker` of that connection, which says what is new:

* **Change, not repetition.** A channel is delivered when its (bootId, transitionId) changes.
  The first read after the agent starts delivers the current values: the store sees a
  duplicate, which is correct. A counter of 0 means "no transition yet in this boot" and is
  never delivered (also not from the ring: after a 16-bit wrap the transition that lands on 0
  is said by the ``wrap`` anomaly, not stored under an id that means "none").
* **Boot change.** A new boot id read from the controller is a :class:`BootSeen` with evidence
  (which register or node, the previous value, OPC UA ``ServerStatus/StartTime``). Counters of
  a boot seen starting while we watched start from 0, so a first read of T3 there means T1, T2
  were missed. A device without a readable boot id gets deliveries without one
  (``identity_incomplete``): never a boot id from a date, the gateway clock or the last value.
* **Torn snapshot.** When the boot id was read more than once for one snapshot (the map does
  not allow one request) and the reads differ, nothing is observed: the source reads again.
* **Wrap or reset.** A counter that steps back within one boot wrapped when it went from the
  top quarter of its range to the bottom quarter; any other step back is a reset. Both are
  anomalies, neither is a restart; the new transition is still delivered under its own key.
* **Gaps, never invented.** Transitions the counters say were missed (91 -> 94: 92, 93) and
  that no ring entry supplied become a ``gap`` anomaly naming the range, or ``overrun`` when
  the ring's head moved further than its capacity since the last ring read.
* **Ring entries** are delivered (``live=False``) with the boot id each entry carries, however
  late; entries already delivered by this tracker (live or from the ring) are not repeated,
  so a transition read live and again in the ring is one arrival per path.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from agent.core.contract import Anomaly, Delivery, format_timestamp, payload_hash

U32 = 2**32
Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ChannelRead:
    """One channel as read. ``transition_id`` None with ``error`` set: the read of it failed."""

    channel: str
    transition_id: int | None
    state: Any = None
    source_timestamp: str | None = None
    latched: Mapping[str, Any] = field(default_factory=dict)
    bits: int = 32
    error: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


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
class BootSeen:
    """A boot id read straight from a controller (the store makes BootObserved of new ones)."""

    device: str
    boot_id: str
    seen_at: str
    source_ts: str | None
    live: bool
    evidence: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Observations:
    """What one snapshot adds: deliveries (ring entries first, oldest first), boots, anomalies."""

    deliveries: tuple[Delivery, ...] = ()
    boots: tuple[BootSeen, ...] = ()
    anomalies: tuple[Anomaly, ...] = ()
    torn: bool = False
    notes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.deliveries or self.boots or self.anomalies)


# --- small pure helpers the sources share ------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)


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


def make_delivery(
    *,
    device: str,
    channel: str,
    transition_id: int,
    boot_id: str | None,
    state: Any,
    source_timestamp: str | None,
    latched: Mapping[str, Any],
    arrival_at: str,
    receiver: str,
    live: bool,
    raw: Mapping[str, Any],
) -> Delivery:
    """A poller's delivery: payload is exactly ``{"state": ...}`` plus latched fields (contract 1)."""
    payload = {**latched, "state": state}
    return Delivery(
        source=f"{device}/{channel}",
        transition_id=str(transition_id),
        boot_id=boot_id,
        source_timestamp=source_timestamp,
        arrival_at=arrival_at,
        payload=payload,
        payload_hash=payload_hash(payload, source_timestamp),
        raw=json.dumps(_plain(raw), sort_keys=True, default=str, separators=(",", ":"), allow_nan=False),
        receiver=receiver,
        live=live,
        missing=() if boot_id else ("bootId",),
        evidence=_plain(raw),
    )


def _plain(value: Any) -> Any:
    """Evidence as strict JSON: NaN and Inf (e.g. a float register of all ones) as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def subtract(ranges: Iterable[Range], taken: set[int]) -> list[Range]:
    """Inclusive ranges minus the values in ``taken``, as inclusive ranges again."""
    out: list[Range] = []
    for lo, hi in ranges:
        inside = sorted(v for v in taken if lo <= v <= hi)
        start = lo
        for v in inside:
            if v > start:
                out.append((start, v - 1))
            start = v + 1
        if start <= hi:
            out.append((start, hi))
    return out


# --- the tracker --------------------------------------------------------------------------------


class DeviceTracker:
    """Change detection for one device over one connection; keeps state across reconnects.

    Not thread-safe and not shared: one connection task owns one tracker.
    """

    def __init__(self, device: str, *, ring_mapped: bool = False, remember: int = 4096) -> None:
        self.device = device
        self.ring_mapped = ring_mapped
        self.remember = remember
        self.last_boot: str | None = None
        self.counter_boot: str | None = None
        self.counters: dict[str, int] = {}
        self.last_head: int | None = None
        self.last_start_time: str | None = None
        self.ring_due = True
        self._delivered: OrderedDict[tuple[str, str | None, int], None] = OrderedDict()

    def reconnected(self) -> None:
        """Call after every (re)connect: the next snapshot reads the ring (the outage may hide entries)."""
        self.ring_due = True

    def needs_ring(self, snap: Snapshot) -> bool:
        """Whether this snapshot should come with a ring read (asked before :meth:`observe`)."""
        if not self.ring_mapped:
            return False
        if self.ring_due or self.last_head is None:
            return True
        if snap.boot_id is not None and snap.boot_id != self.last_boot:
            return True
        if snap.boot_id != self.counter_boot:
            return True
        for ch in snap.channels:
            last = self.counters.get(ch.channel)
            tid = ch.transition_id
            if tid is not None and last is not None and tid not in (last, last + 1):
                return True
        return False

    def observe(self, snap: Snapshot) -> Observations:
        if len(set(snap.boot_reads)) > 1:
            return Observations(
                torn=True, notes=(f"boot id moved during the read {snap.boot_reads}; reading again",)
            )
        notes: list[str] = []
        boots = self._boot(snap, notes)
        live, missing, anomalies = self._channels(snap, notes)
        buffered, overran = self._ring(snap, notes) if snap.ring is not None else ([], False)
        if snap.ring is not None:
            self.ring_due = False
        anomalies += self._gaps(snap, missing, overran)
        return Observations(tuple(buffered + live), tuple(boots), tuple(anomalies), False, tuple(notes))

    def observe_entries(self, entries: Iterable[RingItem], *, read_at: str, receiver: str) -> Observations:
        """Transitions that arrive with their full identity (OPC UA events): live deliveries."""
        out = []
        for e in entries:
            d = self._entry(e, read_at, receiver, live=True)
            if d is not None:
                out.append(d)
        return Observations(tuple(out))

    # --- steps of observe ------------------------------------------------------------------------

    def _boot(self, snap: Snapshot, notes: list[str]) -> list[BootSeen]:
        out: list[BootSeen] = []
        boot = snap.boot_id
        restarted = (
            snap.start_time is not None
            and self.last_start_time is not None
            and snap.start_time != self.last_start_time
        )
        if restarted:
            notes.append(
                f"server restarted: ServerStatus/StartTime {self.last_start_time} -> {snap.start_time}"
            )
        if boot is not None and boot != self.last_boot:
            previous = self.last_boot
            where = ", ".join(f"{k} {v}" for k, v in snap.boot_where.items()) or "boot id"
            summary = (
                f"boot id ({where}) changed from {previous} to {boot}"
                if previous is not None
                else f"boot id ({where}) read as {boot}"
            )
            evidence: dict[str, Any] = {"summary": summary, **snap.boot_where, "receiver": snap.receiver}
            if previous is not None:
                evidence["previous_value"] = previous
            if snap.start_time is not None:
                evidence["server_start_time"] = snap.start_time
                if restarted:
                    evidence["previous_server_start_time"] = self.last_start_time
            out.append(BootSeen(self.device, boot, snap.read_at, None, True, evidence))
            if previous is not None:
                notes.append(summary)
            self.last_boot = boot
        if snap.start_time is not None:
            self.last_start_time = snap.start_time
        if boot != self.counter_boot:
            # Counters of a boot we saw begin start at 0; otherwise they are unknown until read.
            started_here = boot is not None and self.counter_boot is not None
            self.counters = {ch.channel: 0 for ch in snap.channels} if started_here else {}
            self.counter_boot = boot
        return out

    def _channels(
        self, snap: Snapshot, notes: list[str]
    ) -> tuple[list[Delivery], dict[str, list[Range]], list[Anomaly]]:
        out: list[Delivery] = []
        missing: dict[str, list[Range]] = {}
        anomalies: list[Anomaly] = []
        boot = snap.boot_id
        for ch in snap.channels:
            tid = ch.transition_id
            if tid is None:
                continue
            last = self.counters.get(ch.channel)
            self.counters[ch.channel] = tid
            if last is not None and tid == last:
                continue
            if last is not None and tid > last:
                if tid - last > 1:
                    missing[ch.channel] = [(last + 1, tid - 1)]
            elif last is not None:  # a step back within one boot
                wrap = is_wrap(last, tid, ch.bits)
                kind = "wrap" if wrap else "reset"
                notes.append(f"{ch.channel}: counter {kind} {last} -> {tid}")
                if boot is not None:
                    anomalies.append(
                        Anomaly(
                            f"{self.device}/{ch.channel}",
                            boot,
                            kind,
                            str(last),
                            str(tid),
                            snap.read_at,
                            {"receiver": snap.receiver, "bits": ch.bits},
                        )
                    )
                if wrap:
                    top = 2**ch.bits - 1
                    missing[ch.channel] = [r for r in ((last + 1, top), (1, tid - 1)) if r[0] <= r[1]]
            if tid == 0:
                continue
            key = (ch.channel, boot, tid)
            if key in self._delivered:
                continue
            self._remember(key)
            boot_raw: dict[str, Any] = {"value": boot, **snap.boot_where}
            if snap.boot_error:
                boot_raw["error"] = snap.boot_error
            raw: dict[str, Any] = {"read": dict(ch.raw), "boot": boot_raw}
            if snap.start_time is not None:
                raw["server_start_time"] = snap.start_time
            out.append(
                make_delivery(
                    device=self.device,
                    channel=ch.channel,
                    transition_id=tid,
                    boot_id=boot,
                    state=ch.state,
                    source_timestamp=ch.source_timestamp,
                    latched=ch.latched,
                    arrival_at=snap.read_at,
                    receiver=snap.receiver,
                    live=True,
                    raw=raw,
                )
            )
        return out, missing, anomalies

    def _ring(self, snap: Snapshot, notes: list[str]) -> tuple[list[Delivery], bool]:
        ring = snap.ring
        assert ring is not None
        overran = False
        entries = sorted((e for e in ring.entries if e.seq != 0), key=lambda e: e.seq)
        if self.last_head is not None:
            advanced = (ring.head - self.last_head) % U32
            overran = advanced > ring.capacity
            if overran:
                notes.append(f"ring overrun: head moved {advanced} entries, capacity {ring.capacity}")
            entries = [e for e in entries if 0 < (e.seq - self.last_head) % U32 <= advanced]
        self.last_head = ring.head
        out = []
        for e in entries:
            d = self._entry(e, snap.read_at, snap.receiver, live=False)
            if d is not None:
                out.append(d)
        return out, overran

    def _entry(self, e: RingItem, read_at: str, receiver: str, *, live: bool) -> Delivery | None:
        if e.channel is None or e.transition_id == 0:
            return None
        key = (e.channel, e.boot_id, e.transition_id)
        if key in self._delivered:
            return None
        self._remember(key)
        return make_delivery(
            device=self.device,
            channel=e.channel,
            transition_id=e.transition_id,
            boot_id=e.boot_id,
            state=e.state,
            source_timestamp=e.source_timestamp,
            latched={},
            arrival_at=read_at,
            receiver=receiver,
            live=live,
            raw={"ring" if not live else "event": dict(e.raw), "seq": e.seq},
        )

    def _gaps(self, snap: Snapshot, missing: dict[str, list[Range]], overran: bool) -> list[Anomaly]:
        boot = snap.boot_id
        if boot is None:
            return []  # an anomaly names a generation; none is made up
        out = []
        for channel, ranges in missing.items():
            seen = {tid for (ch, b, tid) in self._delivered if ch == channel and b == boot}
            for lo, hi in subtract(ranges, seen):
                kind = "overrun" if overran else "gap"
                evidence = {"receiver": snap.receiver, "ring_read": snap.ring is not None}
                if snap.ring_error:
                    evidence["ring_error"] = snap.ring_error
                out.append(
                    Anomaly(f"{self.device}/{channel}", boot, kind, str(lo), str(hi), snap.read_at, evidence)
                )
        return out

    def _remember(self, key: tuple[str, str | None, int]) -> None:
        self._delivered[key] = None
        while len(self._delivered) > self.remember:
            self._delivered.popitem(last=False)

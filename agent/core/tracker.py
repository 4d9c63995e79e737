"""The transition tracker: from successive snapshots of one device to what is new (pure).

Holds :class:`DeviceTracker`, the change detection of one device over one connection. It must
not do I/O, read a clock or use asyncio; the read types live in :mod:`agent.core.snapshot`.

* **Change, not repetition.** A channel is delivered when its (bootId, transitionId) changes.
  The first read after the agent starts delivers the current values: the store sees a
  duplicate, which is correct. A counter of 0 means "no transition yet in this boot" and is
  never delivered (also not from the ring: after a 16-bit wrap the transition that lands on 0
  is said by the ``wrap`` anomaly, not stored under an id that means "none").
* **Boot change.** A new boot id read from the controller is a ``BootSighting`` with evidence
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
* **Window channels** (no counter, ``identity: window``) are delivered when their state
  changes, with a window key (:class:`agent.core.window.WindowChanges`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from agent.core.contract import Anomaly, Delivery
from agent.core.decide import BootSighting
from agent.core.snapshot import (
    ChannelRead,
    Observations,
    RingItem,
    Snapshot,
    is_wrap,
    make_delivery,
)
from agent.core.window import WindowChanges

U32 = 2**32
Range = tuple[int, int]
DeliveredKey = tuple[str, str | None, int]  # (channel, boot id, transition id)


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
        self._delivered: OrderedDict[DeliveredKey, None] = OrderedDict()
        self.windows = WindowChanges(device)

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
        """What ``snap`` adds: boots, then channels, then the ring, then the gaps left over."""
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

    # --- boot: restart evidence, a new boot id, counters of a new boot ---------------------------

    def _boot(self, snap: Snapshot, notes: list[str]) -> list[BootSighting]:
        restarted = self._server_restarted(snap, notes)
        out: list[BootSighting] = []
        if snap.boot_id is not None and snap.boot_id != self.last_boot:
            out.append(self._boot_seen(snap, snap.boot_id, restarted, notes))
            self.last_boot = snap.boot_id
        if snap.start_time is not None:
            self.last_start_time = snap.start_time
        self._reset_counters(snap)
        return out

    def _server_restarted(self, snap: Snapshot, notes: list[str]) -> bool:
        """Whether ``ServerStatus/StartTime`` moved since the last snapshot (said in a note)."""
        restarted = (
            snap.start_time is not None
            and self.last_start_time is not None
            and snap.start_time != self.last_start_time
        )
        if restarted:
            notes.append(
                f"server restarted: ServerStatus/StartTime {self.last_start_time} -> {snap.start_time}"
            )
        return restarted

    def _boot_seen(self, snap: Snapshot, boot: str, restarted: bool, notes: list[str]) -> BootSighting:
        """A boot id other than the last one, with the evidence of where and how it was read."""
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
            notes.append(summary)
        if snap.start_time is not None:
            evidence["server_start_time"] = snap.start_time
            if restarted:
                evidence["previous_server_start_time"] = self.last_start_time
        return BootSighting(self.device, boot, snap.read_at, None, True, dict(evidence))

    def _reset_counters(self, snap: Snapshot) -> None:
        """On a boot change: counters of a boot we saw begin start at 0, else unknown until read."""
        if snap.boot_id == self.counter_boot:
            return
        started_here = snap.boot_id is not None and self.counter_boot is not None
        self.counters = {ch.channel: 0 for ch in snap.channels} if started_here else {}
        self.counter_boot = snap.boot_id

    # --- channels: counter steps and live deliveries ---------------------------------------------

    def _channels(
        self, snap: Snapshot, notes: list[str]
    ) -> tuple[list[Delivery], dict[str, list[Range]], list[Anomaly]]:
        out: list[Delivery] = []
        missing: dict[str, list[Range]] = {}
        anomalies: list[Anomaly] = []
        for ch in snap.channels:
            if ch.window_ms is not None:  # no counter: a window key when the state changes
                if (window_delivery := self.windows.observe(snap, ch)) is not None:
                    out.append(window_delivery)
                continue
            tid = ch.transition_id
            if tid is None:
                continue
            last = self.counters.get(ch.channel)
            self.counters[ch.channel] = tid
            if last == tid:
                continue
            if last is not None:
                skipped, anomaly = self._counter_step(snap, ch, last, tid, notes)
                if skipped is not None:
                    missing[ch.channel] = skipped
                if anomaly is not None:
                    anomalies.append(anomaly)
            delivery = self._live_delivery(snap, ch, tid)
            if delivery is not None:
                out.append(delivery)
        return out, missing, anomalies

    def _counter_step(
        self, snap: Snapshot, ch: ChannelRead, last: int, tid: int, notes: list[str]
    ) -> tuple[list[Range] | None, Anomaly | None]:
        """The transitions a counter skipped, and the anomaly of a step back (wrap or reset)."""
        if tid > last:
            return ([(last + 1, tid - 1)] if tid - last > 1 else None), None
        wrap = is_wrap(last, tid, ch.bits)
        kind = "wrap" if wrap else "reset"
        notes.append(f"{ch.channel}: counter {kind} {last} -> {tid}")
        anomaly = None
        if snap.boot_id is not None:
            anomaly = Anomaly(
                f"{self.device}/{ch.channel}",
                snap.boot_id,
                kind,
                str(last),
                str(tid),
                snap.read_at,
                {"receiver": snap.receiver, "bits": ch.bits},
            )
        if not wrap:
            return None, anomaly
        top = 2**ch.bits - 1
        return [r for r in ((last + 1, top), (1, tid - 1)) if r[0] <= r[1]], anomaly

    def _live_delivery(self, snap: Snapshot, ch: ChannelRead, tid: int) -> Delivery | None:
        """The channel's current transition, unless it is 0 ("none yet") or already delivered."""
        if tid == 0:
            return None
        key = (ch.channel, snap.boot_id, tid)
        if key in self._delivered:
            return None
        self._remember(key)
        boot_raw: dict[str, Any] = {"value": snap.boot_id, **snap.boot_where}
        if snap.boot_error:
            boot_raw["error"] = snap.boot_error
        raw: dict[str, Any] = {"read": dict(ch.raw), "boot": boot_raw}
        if snap.start_time is not None:
            raw["server_start_time"] = snap.start_time
        return make_delivery(
            device=self.device,
            channel=ch.channel,
            transition_id=tid,
            boot_id=snap.boot_id,
            state=ch.state,
            source_timestamp=ch.source_timestamp,
            latched=ch.latched,
            arrival_at=snap.read_at,
            receiver=snap.receiver,
            live=True,
            raw=raw,
        )

    # --- ring, events and gaps -------------------------------------------------------------------

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

    def _remember(self, key: DeliveredKey) -> None:
        self._delivered[key] = None
        while len(self._delivered) > self.remember:
            self._delivered.popitem(last=False)

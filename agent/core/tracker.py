"""The transition tracker: from successive snapshots of one device to what is new (pure).

Holds :class:`DeviceTracker`, the change detection of one device over one connection. It must
not do I/O, read a clock or use asyncio; the read types live in :mod:`agent.core.snapshot`, a
boot sighting's evidence in :mod:`agent.core.boot_evidence`, counter steps and gaps in
:mod:`agent.core.gaps`. Each rule's reasons: docs/architecture.md, "The transition tracker".

* A channel is delivered when its (bootId, transitionId) changes; a counter of 0 ("no
  transition yet in this boot") never is, also not from the ring.
* Resumed, never fresh: a tracker starts from a :class:`Resume` (what the store recorded), and
  each observation carries the :class:`Positions` it moved.
* No cache in front of the store: every change is delivered, the store decides ``duplicate``
  or ``conflict``; only a read identical (key, source time, state) to one of the last reads of
  this tracker is not delivered again.
* A new boot id is a ``BootSighting`` with evidence; no readable boot id gives deliveries
  without one (``identity_incomplete``), never a boot id made up. A torn snapshot (the boot id
  read twice, differently) observes nothing.
* A counter that steps back wrapped (top quarter to bottom quarter) or was reset: an anomaly,
  never a restart. Missed transitions no ring entry supplied are a ``gap`` (or ``overrun``)
  naming the range, said only when something is really missing.
* Ring entries are delivered (``live=False``) with their own boot id; window channels (no
  counter) by :class:`agent.core.window.WindowChanges`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.core.boot_evidence import boot_sighting, server_restarted
from agent.core.contract import Anomaly, Delivery
from agent.core.decide import BootSighting
from agent.core.gaps import Range, counter_step, gap_anomalies
from agent.core.snapshot import (
    ChannelRead,
    Observations,
    Positions,
    RingItem,
    Snapshot,
    boot_raw,
    live_delivery,
    make_delivery,
)
from agent.core.window import WindowChanges

U32 = 2**32
# (channel, boot id, transition id, source time, state): one transition as this tracker read it
ReadIdentity = tuple[str, str | None, int, str | None, Any]
RECENT_READS = 256  # reads kept to spot a ring entry read live before; raised to the ring's capacity


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a tracker starts: what the store recorded for the device (plain data, no store).

    ``boot``: the device's last boot seen live; ``counters``: the last transitionId recorded per
    channel in that boot; ``ring_head``: the ring head last read; ``windows``: per window channel,
    the latest source time of its events in the store (contract text). All empty for a new device.
    """

    boot: str | None = None
    counters: Mapping[str, int] = field(default_factory=dict)
    ring_head: int | None = None
    windows: Mapping[str, str] = field(default_factory=dict)


class DeviceTracker:
    """Change detection for one device over one connection; keeps state across reconnects.

    Not thread-safe and not shared: one connection task owns one tracker.
    """

    def __init__(self, device: str, *, ring_mapped: bool = False, resume: Resume | None = None) -> None:
        start = resume or Resume()
        self.device = device
        self.ring_mapped = ring_mapped
        self.last_boot: str | None = start.boot
        self.counter_boot: str | None = start.boot
        self.counters: dict[str, int] = dict(start.counters) if start.boot is not None else {}
        self.last_head: int | None = start.ring_head
        self.last_start_time: str | None = None
        self.ring_due = True
        self._recent: OrderedDict[ReadIdentity, None] = OrderedDict()
        self._recent_max = RECENT_READS
        self.windows = WindowChanges(device, recorded=start.windows)

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

    def settled(self, snap: Snapshot) -> bool:
        """Whether observing ``snap`` again, at any read time, would add nothing and change nothing.

        Asked right after :meth:`observe` of ``snap``. True when no ring read is due and the
        server start time (OPC UA) is the one already seen: counters, boot and window states
        then equal what ``snap`` holds, so a source that reads exactly the same values again
        on the same connection may skip decoding and observing them. Any reconnect
        (:meth:`reconnected`) or changed value needs a full observation.
        """
        if snap.start_time is not None and snap.start_time != self.last_start_time:
            return False
        return not self.needs_ring(snap)

    def observe(self, snap: Snapshot) -> Observations:
        """What ``snap`` adds: boots, then channels, then the ring, then the gaps left over."""
        if len(set(snap.boot_reads)) > 1:
            return Observations(
                torn=True, notes=(f"boot id moved during the read {snap.boot_reads}; reading again",)
            )
        notes: list[str] = []
        before = (self.counter_boot, dict(self.counters), self.last_head)
        boots = self._boot(snap, notes)
        live, missing, anomalies = self._channels(snap, notes)
        buffered, advanced = self._ring(snap) if snap.ring is not None else ([], 0)
        overran = snap.ring is not None and advanced > snap.ring.capacity
        if snap.ring is not None:
            self.ring_due = False
        gaps = gap_anomalies(self.device, snap, missing, overran, buffered)
        lost = [f"{a.source} {a.first}..{a.last}" for a in gaps if a.kind == "overrun"]
        if lost and snap.ring is not None:  # only when entries are really missing
            notes.append(
                f"ring overrun: head moved {advanced} entries, capacity {snap.ring.capacity}; "
                f"lost (neither in the ring nor read live): {', '.join(lost)}"
            )
        anomalies += gaps
        positions = self._moved(*before)
        return Observations(
            tuple(buffered + live), tuple(boots), tuple(anomalies), False, tuple(notes), positions
        )

    def observe_entries(self, entries: Iterable[RingItem], *, read_at: str, receiver: str) -> Observations:
        """Transitions that arrive with their full identity (OPC UA events): live deliveries."""
        out = []
        for e in entries:
            d = self._entry(e, read_at, receiver, live=True)
            if d is not None:
                out.append(d)
        return Observations(tuple(out))

    def _moved(self, boot: str | None, counters: dict[str, int], head: int | None) -> Positions | None:
        """The positions this observation moved (recorded by the store with it), or None."""
        channels = {
            ch: tid
            for ch, tid in self.counters.items()
            if boot != self.counter_boot or counters.get(ch) != tid
        }
        ring_head = self.last_head if self.last_head != head else None
        if self.counter_boot is None:
            channels = {}  # a position names a boot; without one there is nothing to resume from
        if not channels and ring_head is None:
            return None
        return Positions(self.device, self.counter_boot, channels, ring_head)

    # --- boot: restart evidence, a new boot id, counters of a new boot ---------------------------

    def _boot(self, snap: Snapshot, notes: list[str]) -> list[BootSighting]:
        restarted = server_restarted(snap, self.last_start_time, notes)
        out: list[BootSighting] = []
        if snap.boot_id is not None and snap.boot_id != self.last_boot:
            out.append(boot_sighting(self, snap, snap.boot_id, restarted, notes))
            self.last_boot = snap.boot_id
        if snap.start_time is not None:
            self.last_start_time = snap.start_time
        self._reset_counters(snap)
        return out

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
                if (window_delivery := self.windows.observe(snap, ch, notes)) is not None:
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
                skipped, anomaly = counter_step(self.device, snap, ch, last, tid, notes)
                if skipped is not None:
                    missing[ch.channel] = skipped
                if anomaly is not None:
                    anomalies.append(anomaly)
            delivery = self._live_delivery(snap, ch, tid)
            if delivery is not None:
                out.append(delivery)
        return out, missing, anomalies

    def _live_delivery(self, snap: Snapshot, ch: ChannelRead, tid: int) -> Delivery | None:
        """The channel's current transition, unless it is 0 ("none yet")."""
        if tid == 0:
            return None
        identity = (ch.channel, snap.boot_id, tid, ch.source_timestamp, ch.state)
        if identity in self._recent:
            return None  # this very transition came as an OPC UA event already: the same read twice
        self._read(identity)
        raw: dict[str, Any] = {"read": ch.raw, "boot": boot_raw(snap)}  # _plain copies it
        if snap.start_time is not None:
            raw["server_start_time"] = snap.start_time
        return live_delivery(self.device, ch, snap, tid, raw)

    # --- ring, events and gaps -------------------------------------------------------------------

    def _ring(self, snap: Snapshot) -> tuple[list[Delivery], int]:
        """The ring entries after the last head read, and how far the head moved (0: unknown)."""
        ring = snap.ring
        assert ring is not None
        advanced = 0
        entries = sorted((e for e in ring.entries if e.seq != 0), key=lambda e: e.seq)
        self._recent_max = max(RECENT_READS, ring.capacity)
        if self.last_head is not None:
            advanced = (ring.head - self.last_head) % U32
            entries = [e for e in entries if 0 < (e.seq - self.last_head) % U32 <= advanced]
        self.last_head = ring.head
        out = []
        for e in entries:
            if (e.channel, e.boot_id, e.transition_id, e.source_timestamp, e.state) in self._recent:
                continue  # read live before (same key, time and state): the same transition again
            d = self._entry(e, snap.read_at, snap.receiver, live=False)
            if d is not None:
                out.append(d)
        return out, advanced

    def _entry(self, e: RingItem, read_at: str, receiver: str, *, live: bool) -> Delivery | None:
        if e.channel is None or e.transition_id == 0:
            return None
        self._read((e.channel, e.boot_id, e.transition_id, e.source_timestamp, e.state))
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

    def _read(self, identity: ReadIdentity) -> None:
        """Keep the last reads (at least as many as the ring holds): a ring entry or a live read
        identical to one of them (key, source time and state) is the same transition again."""
        self._recent[identity] = None
        self._recent.move_to_end(identity)
        while len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)

"""OPC UA source (asyncua 2.1): all of a device's nodes in one Read, optionally driven by subscriptions.

Holds :class:`OpcUaSource`, the session loop of one connection as named steps (connect, read
boot evidence, subscribe, reconcile, wait, close). It must not write node values.

Every poll is one ``read_attributes`` call with every node of the device (boot id, channel
fields, ring head and arrays, and ``ServerStatus/StartTime`` as restart evidence), so one
snapshot is consistent and the Bad status of one node fails only that field. A read that
answers exactly what the last read on the same session answered (each node's status code,
variant type and value, and the source timestamps a snapshot uses) adds nothing when the
tracker said it was settled after that read: no snapshot is built then. A new session, an
event, an alarm or any changed value gives a full snapshot and observation.

With ``subscribe: true`` a data-change subscription on the boot id and the transition
counters (and, with ``events`` mapped, an event subscription) only *triggers* that read: it
never assembles a snapshot from notifications, because asyncua delivers them grouped per
monitored item, not in order. A reconciling read also runs on every (re)connect and every
``reconcile`` interval, because asyncua 2.1 can leave a subscription silently empty after a
reconnect. Event notifications carry the full identity of a
transition (Channel, TransitionId, BootId, State, SourceTime) and are delivered as they come.

Reconnect: on any failure the client is dropped and a new one is built from scratch (new
session, new subscriptions, namespace index resolved again) after a capped, jittered backoff
(:func:`agent.sources.base.run_source`); asyncua's own auto-reconnect is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agent.config.sources import Device, OpcUa
from agent.core.alarms import AlarmMemoryReader, AlarmTracker
from agent.core.errors import SourceUnavailable
from agent.core.snapshot import Observations, RingItem, Snapshot
from agent.core.timestamps import format_timestamp
from agent.core.tracker import DeviceTracker, Resume
from agent.sources.base import StateLog
from agent.sources.opcua.alarms import AlarmLink, ua
from agent.sources.opcua.events import SubscriptionHandler, event_item, ua_time
from agent.sources.opcua.reads import boot_of, channel_of, ring_of, sort_values
from agent.sources.opcua.session import (
    channel_refusal,
    link_errors,
    namespace_index,
    new_client,
    resolve_nodes,
    secure,
    subscribe,
)
from agent.sources.readings import merge
from agent.sources.schedule import BOOK, Pacer, due_in_s, next_tick

log = logging.getLogger(__name__)
NOTHING = Observations()  # what a poll that read exactly what the last one read adds
logging.getLogger("asyncua").setLevel(logging.CRITICAL)  # it logs tracebacks once per second while down


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class OpcUaSource:
    """One OPC UA connection of one device."""

    def __init__(
        self,
        device: Device,
        conn: OpcUa,
        *,
        clock: Callable[[], str] = _now,
        resume: Resume | None = None,
        alarm_memory: AlarmMemoryReader | None = None,
    ) -> None:
        self.dev, self.conn, self.clock = device, conn, clock
        self.device, self.receiver = device.name, conn.receiver
        self.tracker = DeviceTracker(device.name, ring_mapped=device.ring is not None, resume=resume)
        self.client: Any = None
        self.keys: list[str] = []
        self.nodes: list[Any] = []
        self.handler = SubscriptionHandler()
        self.event_tids: dict[str, int] = {}  # channel -> transitionId of its last event (this session)
        self.pending: tuple[Snapshot, float] | None = None  # a read held for its events, until when
        self.lost = asyncio.Event()
        self.next_reconcile = 0.0
        self.errors = StateLog(log, f'Device "{device.name}" ({self.receiver})')
        self.polls = 0
        alarms = device.alarms
        self.alarm_tracker = (
            AlarmTracker(device.name, template=alarms.template, channel=alarms.channel) if alarms else None
        )
        self.alarm_link: AlarmLink | None = None
        self.alarm_memory = alarm_memory  # read once, before the first connect
        self.alarm_pending = Observations()
        # Its slot in the poll interval (agent.sources.schedule), given back by `release`.
        self.slot = BOOK.take(device.poll)
        self.phase = self.slot.phase
        self.pacer = Pacer()
        # What the last read on this session answered (`_answered`), kept when the tracker was
        # settled after observing it; the nodes whose source timestamp a snapshot uses.
        self._same: list[Any] | None = None
        self._stamped: list[int] = []
        if conn.security.insecure:  # built once at start-up: the warning is said once per start
            log.warning(
                'Device "%s" (%s): OPC UA security policy None (configured explicitly): the traffic is '
                "neither signed nor encrypted, and the server is not authenticated",
                device.name,
                self.receiver,
            )

    # --- Source protocol ---------------------------------------------------------------------

    async def connect(self) -> None:
        """A new client and session: security, then the nodes, then the subscriptions."""
        timeout = self.conn.timeout * 3
        self.lost = asyncio.Event()
        self.pending = None  # a read of the last session is not judged in this one
        self._same = None
        client = self.client = new_client(self.conn, self.lost)
        with (
            link_errors("refused", "cannot connect", "an answer", self.conn.max_message_size),
            channel_refusal(self.conn),
        ):
            async with asyncio.timeout(timeout):
                await secure(client, self.conn)
            async with asyncio.timeout(timeout):
                await self._open_session(client)
        self.tracker.reconnected()
        self.next_reconcile = 0.0  # the first read after a (re)connect reconciles at once

    async def _open_session(self, client: Any) -> None:
        await client.connect()
        idx = await namespace_index(client, self.dev.namespace) if self.dev.namespace else None
        self.keys, self.nodes = resolve_nodes(client, self.dev, idx)
        stamped = {f"{ch.name}.state" for ch in self.dev.channels if ch.time_from_state}
        self._stamped = [i for i, key in enumerate(self.keys) if key in stamped]
        if self.conn.subscribe:
            await self._subscribe(client, idx)
        if self.dev.alarms is not None:
            await self._open_alarms(client, idx)

    async def _open_alarms(self, client: Any, idx: int | None) -> None:
        """The generation read at this connect, the alarm subscription, then ConditionRefresh
        (docs/alarms.md): every (re)connect is a new session, so every one refreshes."""
        assert self.dev.alarms is not None and self.alarm_tracker is not None
        self.alarm_link = None
        if self.alarm_memory is not None:  # the agent restarted: judge this connect as a reconnect
            self.alarm_tracker.resume(await self.alarm_memory(self.device))
            self.alarm_memory = None
        snap = await self.snapshot()
        by_start_time = self.dev.boot_id is None
        generation = snap.start_time if by_start_time else snap.boot_id
        link = AlarmLink(client, self.dev.alarms, self.conn.publishing)
        await link.open(idx)
        self.alarm_link = link
        seen = self.alarm_tracker.connected(
            generation, snap.read_at, start_time=by_start_time, receiver=self.receiver
        )
        self.alarm_pending = merge(self.alarm_pending, seen)
        await self._refresh_alarms()

    async def _refresh_alarms(self) -> None:
        """ConditionRefresh; a server that refuses it ends the gap now (nothing re-sent), the
        link stays up."""
        assert self.alarm_link is not None and self.alarm_tracker is not None
        try:
            async with asyncio.timeout(self.conn.timeout):
                await self.alarm_link.refresh()
        except ua.UaError as exc:
            self.errors.set("alarms", f"ConditionRefresh refused: {type(exc).__name__} {exc}")
            failed = self.alarm_tracker.refresh_failed(self.clock(), f"ConditionRefresh refused: {exc}")
            self.alarm_pending = merge(self.alarm_pending, failed)
            return
        self.errors.set("alarms", None)

    async def _alarm_poll(self) -> Observations:
        """The alarm notifications since the last poll (and what connect left pending)."""
        pending, self.alarm_pending = self.alarm_pending, Observations()
        if self.alarm_link is None or self.alarm_tracker is None:
            return pending
        events = self.alarm_link.take()
        if not events:
            return pending
        seen, refresh_now = self.alarm_tracker.observe(events, at=self.clock(), receiver=self.receiver)
        if refresh_now:  # RefreshRequired: the gap is open; the refresh's events come next
            with link_errors("refresh refused", "refresh failed", "the response", self.conn.max_message_size):
                await self._refresh_alarms()
        return merge(pending, seen)

    async def _subscribe(self, client: Any, idx: int | None) -> None:
        """A fresh handler; the boot id, every transition counter and the state of every window
        channel (it has no counter) trigger a read when they change."""
        self.handler = SubscriptionHandler()
        self.event_tids = {}
        self.pending = None
        window_states = {f"{ch.name}.state" for ch in self.dev.channels if ch.transition_id is None}
        watched = [
            n
            for k, n in zip(self.keys, self.nodes, strict=True)
            if k == "boot" or k.endswith(".transition_id") or k in window_states
        ]
        # An alarms-only device watches nothing: no data-change subscription at all (node-opcua
        # answers an empty CreateMonitoredItems with BadNothingToDo, and so may a PLC).
        await subscribe(client, self.conn, self.dev, watched, self.handler, idx)

    def release(self) -> None:
        """Give the slot back (the device stopped for good: removed, or restarted by a reload)."""
        BOOK.give_back(self.slot)

    async def close(self) -> None:
        client, self.client = self.client, None
        self.alarm_link = None
        self._same = None
        self.pacer.drop()
        if client is not None:
            with contextlib.suppress(Exception):  # the peer may be gone; closing must not fail the loop
                async with asyncio.timeout(2):
                    await client.disconnect()

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the next poll is due (interval, or a notification / the reconcile timer), stop or loss."""
        if self.lost.is_set():
            raise SourceUnavailable("connection lost")
        if not self.conn.subscribe and self.alarm_link is None:
            # Plain reads: the poll interval, stop or loss; one future per tick, the timer shared
            # with the connections of its slot.
            tick = self.pacer.tick(next_tick(self.dev.poll, self.phase, time.monotonic()), stop, self.lost)
            if tick is not None:
                await tick
            if self.lost.is_set() and not stop.is_set():
                raise SourceUnavailable("connection lost")
            return
        events = [stop, self.lost]
        if self.conn.subscribe:  # plain reads: only the poll interval, stop or loss end the wait
            events.append(self.handler.trigger)
        if self.alarm_link is not None:  # alarm events are taken as they come
            events.append(self.alarm_link.handler.trigger)
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=self._next_due(), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if self.lost.is_set() and not stop.is_set():
            raise SourceUnavailable("connection lost")

    def _next_due(self) -> float:
        """Seconds to the next read: the poll grid, or the reconcile timer with subscriptions."""
        if not self.conn.subscribe:
            return due_in_s(self.dev.poll, self.phase, time.monotonic())
        due = self.next_reconcile if self.pending is None else min(self.next_reconcile, self.pending[1])
        return max(0.0, due - time.monotonic())

    async def poll(self) -> Observations:
        """The events received since the last poll, then a reconciling read of every node.

        A server queues events until its next publish, so a read (triggered by a data change)
        often shows counters and a ring head ahead of the events received. Judged at once, it
        would record as a gap or an overrun what the next publish delivers. So such a read is
        held (``pending``) and judged once the events up to its counters have come, or one
        publishing interval plus the request timeout after it was made (what has not come by
        then is judged missing, and recorded). Meanwhile each poll hands on the events that
        arrived, and no new read is made. Only channels that had an event in this session are
        waited for: a channel whose transitions the server sends no event of never holds a read.
        An event of another boot than the held read's drops it: a new read is made at once.
        """
        self.polls += 1
        alarms = await self._alarm_poll()
        taken = self.handler.take_events()
        # The time of the events: only a subscription brings events (plain reads ask no clock).
        read_at = self.clock() if taken or self.conn.subscribe else ""
        items = self._event_items(taken)
        answered: list[Any] | None = None
        if self.pending is not None and any(i.boot_id != self.pending[0].boot_id for i in items):
            self.pending = None  # a restart in the events: a new read, judged in the same batch
        if self.pending is None:
            if self.conn.subscribe:
                self.next_reconcile = time.monotonic() + self.conn.reconcile
            data_values = await self._read_nodes()
            answered = self._answered(data_values)
            items += self._event_items(self.handler.drain())  # what came during the read
            if answered == self._same and not items and not (alarms or alarms.notes):
                return NOTHING  # the values of the last read after which the tracker was settled
            snap = self._snapshot_of(data_values)
            due = time.monotonic() + self.conn.publishing + self.conn.timeout
        else:
            (snap, due), self.pending = self.pending, None
        self._same = None
        events = self.tracker.observe_entries(items, read_at=read_at, receiver=self.receiver)
        waits = self.conn.subscribe and self.dev.events is not None
        if waits and time.monotonic() < due and self._behind(snap):
            self.pending = (snap, due)
            return merge(alarms, events)
        seen = self.tracker.observe(snap)
        if answered is not None and self.tracker.settled(snap):
            self._same = answered
        return merge(alarms, events, seen) if items or alarms or alarms.notes else seen

    def _answered(self, data_values: list[Any]) -> list[Any]:
        """What a snapshot is made of, comparable with the last read's: each node's status code,
        variant type and value, and the source timestamps a snapshot uses."""
        out: list[Any] = [(dv.StatusCode.value, dv.Value.VariantType, dv.Value.Value) for dv in data_values]
        for i in self._stamped:
            out.append(data_values[i].SourceTimestamp)
        return out

    def _event_items(self, events: list[Any]) -> list[RingItem]:
        items = [e for e in (event_item(self.dev, ev, self.errors) for ev in events) if e is not None]
        for item in items:
            if item.channel is not None:
                self.event_tids[item.channel] = item.transition_id
        return items

    def _behind(self, snap: Snapshot) -> bool:
        """Whether a channel's counter in ``snap`` moved past the last event of that channel.
        Never for a read of a new boot: it is judged at once, so the boot's sighting and the
        read's evidence of it are recorded before the new boot's events."""
        if snap.boot_id != self.tracker.last_boot:
            return False
        for ch in snap.channels:
            tid, last_event = ch.transition_id, self.event_tids.get(ch.channel)
            if tid is None or last_event is None or tid == self.tracker.counters.get(ch.channel):
                continue
            ahead = (tid - last_event) % 2**ch.bits
            if 0 < ahead < 2 ** (ch.bits - 1):
                return True
        return False

    async def probe(self) -> Snapshot:
        """One read of every node, without touching the tracker (``check --probe``)."""
        return await self.snapshot()

    # --- the read ------------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """One Read of every node: boot evidence, channels and ring as one consistent snapshot."""
        return self._snapshot_of(await self._read_nodes())

    def _snapshot_of(self, data_values: list[Any]) -> Snapshot:
        read_at = self.clock()
        read = sort_values(self.dev, self.keys, data_values)
        boot, boot_error = boot_of(self.dev, read, self.errors)
        channels = tuple(channel_of(ch, read, self.errors) for ch in self.dev.channels)
        ring, ring_error = ring_of(self.dev, read, self.errors)
        return Snapshot(
            device=self.device,
            receiver=self.receiver,
            read_at=read_at,
            boot_id=boot,
            channels=channels,
            boot_where={"node": self.dev.boot_id.node} if self.dev.boot_id else {},
            boot_error=boot_error,
            start_time=ua_time(read.values.get("start_time")),
            ring=ring,
            ring_error=ring_error,
        )

    async def _read_nodes(self) -> list[Any]:
        if self.client is None:
            raise SourceUnavailable("not connected")
        if not self.nodes:  # never an empty Read (a server answers it BadNothingToDo)
            return []
        with link_errors("read refused", "read failed", "the response", self.conn.max_message_size):
            async with asyncio.timeout(self.conn.timeout):
                data_values: list[Any] = await self.client.read_attributes(self.nodes)
        if len(data_values) != len(self.keys):
            raise SourceUnavailable(f"read answered {len(data_values)} values for {len(self.keys)} nodes")
        return data_values

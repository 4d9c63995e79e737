"""The Sparkplug forwarder: one task per `sparkplug:` upstream, fed by the same outbox as
`mqtt:` and `http:` (spec sparkplug.md sections 3 and 5).

Loop per connection: `bdSeq` + 1 committed in the store -> CONNECT (Will NDEATH) -> with a
primary host, wait for its STATE online -> NBIRTH (seq 0) and a DBIRTH per device -> the
outbox oldest first, one DDATA per row (rows that were pending at the births flagged
`is_historical`, and a live row not newer than the last one of its metric) -> a row counts
as delivered once W = 2 x keepalive passed with the session unbroken. A break (connection
lost, an offline STATE, a rebirth request, the stop) leaves the rows inside W pending: they
are read again from the head of the queue after the next births, flagged historical, same
`canonicalId`. Each claim commits `attempts + 1` before anything is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiomqtt

from agent import __version__
from agent.config.sparkplug import SparkplugUpstream
from agent.core.contract import device_of
from agent.core.errors import StoreError
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Transition
from agent.core.retry import retry_delay_s
from agent.core.send_outcome import DELIVERED, SendOutcome, rejected
from agent.core.timestamps import format_timestamp
from agent.sparkplug import mapping
from agent.sparkplug.host import HostState, rebirth_requested
from agent.sparkplug.live import SparkplugState, device_birth_metrics
from agent.sparkplug.payload import DecodeError, payload
from agent.sparkplug.session import Session, SessionBroken, client_id_for, now_ms
from agent.sparkplug.window import DeliveryWindow
from agent.store.outbox import BatchOutcomes
from agent.store.outbox_head import Claimed
from agent.store.sparkplug import SparkplugStore
from agent.store.store import Store

log = logging.getLogger(__name__)

LinkUp = Callable[[str], bool | None]  # a device's PLC link: up, down, or not known yet


class _Break(Exception):
    """The session ends: `reason` says why; `ndeath` whether to publish NDEATH first."""

    def __init__(self, reason: str, *, ndeath: bool) -> None:
        super().__init__(reason)
        self.ndeath = ndeath


class _Rebirth(Exception):
    """NCMD `Node Control/Rebirth`: births again in the same connection."""


class SparkplugForwarder:
    """Drains one upstream's outbox as a Sparkplug edge node. `await run(stop)` in a task."""

    def __init__(
        self,
        store: Store,
        settings: SparkplugUpstream,
        *,
        site: str,
        gateway: str,
        devices: Sequence[tuple[str, tuple[str, ...]]] = (),
        link_up: LinkUp | None = None,
        idle_poll_s: float = 0.5,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.upstream = settings
        self.outbox = store.outbox
        self.db = SparkplugStore(store.outbox.store, settings.name)
        self.store_id = store.store_id
        self.site, self.gateway = site, gateway
        self.node = settings.node_id(gateway)
        self.devices = list(devices)
        self.link_up = link_up or (lambda _d: None)
        self.idle_poll_s = idle_poll_s
        self.jitter = jitter
        self.state = SparkplugState(settings.name, primary_host=settings.primary_host_id)
        self.sink = self  # the service closes `sink` at the end
        self.window = DeliveryWindow(settings.window_s)
        self.config_hash = mapping.config_hash([f"{d}:{','.join(ch)}" for d, ch in self.devices])
        self.client_id = settings.client_id or client_id_for(gateway, settings.name)
        self._wake = asyncio.Event()
        self._session: Session | None = None
        self._host = HostState()
        self._birthed: dict[str, frozenset[str]] = {}  # device -> its declared State metrics
        self._dead: set[str] = set()  # devices whose DDEATH was published
        self._last_ms: dict[tuple[str | None, str], int] = {}
        self._writing: asyncio.Task[None] | None = None  # the evidence of the last batch, being written
        self._mark = 0  # rows up to this outbox id were pending at the births: historical
        self.started = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close(graceful=True)

    async def run(self, stop: asyncio.Event, *, drain_s: float = 5.0) -> None:
        st = self.state
        self.started.set()
        while not stop.is_set():
            try:
                st.bd_seq = await self.db.next_bd_seq()
                session = await Session.open(
                    self.upstream, node=self.node, bd_seq=st.bd_seq, client_id=self.client_id
                )
            except StoreError as exc:
                self._failed(f"store: {exc}")
                await _wait(stop, 1.0)
                continue
            except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                await _wait(stop, self._failed(f"connect failed: {exc}"))
                continue
            self._session = session
            st.connected, st.up, st.failures = True, True, 0
            reason, ndeath = "stopping", True
            try:
                await self._serve(session, stop)
            except _Break as b:
                reason, ndeath = str(b), b.ndeath
            except SessionBroken as exc:
                reason, ndeath = f"connection lost: {exc}", False
            finally:
                self._session = None
                await self._evidence_written()
                resent = self.window.broken()
                st.connected, st.in_window = False, 0
                if not stop.is_set():
                    st.breaks += 1
                log.log(
                    logging.INFO if stop.is_set() else logging.WARNING,
                    "sparkplug session ended upstream=%s bdSeq=%s reason=%s rows_to_resend=%d",
                    self.upstream.name,
                    st.bd_seq,
                    reason,
                    resent,
                )
                await session.close(graceful=ndeath)
            if not stop.is_set() and reason.startswith("connection lost"):
                await _wait(stop, self._failed(reason))

    # --- one session -------------------------------------------------------------------------

    async def _serve(self, session: Session, stop: asyncio.Event) -> None:
        if self.upstream.primary_host_id:
            await self._wait_for_host(session, stop)
        while not stop.is_set():
            try:
                await self._births(session)
                await self._forward(session, stop)
                return
            except _Rebirth:
                self.state.rebirths += 1
                n = self.window.broken()
                log.warning(
                    "sparkplug rebirth requested upstream=%s rows_to_resend=%d", self.upstream.name, n
                )

    async def _wait_for_host(self, session: Session, stop: asyncio.Event) -> None:
        """Publish nothing until the primary host's STATE says online."""
        while not stop.is_set():
            self._inbox(session, births_done=False)
            if self._host_online():
                return
            await self._idle(session, stop, None)

    def _host_online(self) -> bool:
        return self._host.online is True

    async def _births(self, session: Session) -> None:
        st = self.state
        metrics = mapping.node_birth(st.bd_seq or 0, __version__, self.config_hash, now_ms())
        session.publish("NBIRTH", None, payload(metrics), first=True)
        self._birthed.clear()
        self._dead.clear()
        for device, channels in self.devices:
            await self._device_birth(session, device, channels)
            if self.link_up(device) is False:
                self._device_death(session, device)
        self._mark = await self.outbox.last_pending_id(self.upstream.name)
        st.births += 1

    async def _device_birth(self, session: Session, device: str, channels: tuple[str, ...]) -> None:
        live = await self.db.device_live(device, channels)
        body, declared = device_birth_metrics(device, live, now_ms())
        session.publish("DBIRTH", mapping.device_id(device), body)
        self._birthed[device] = declared
        self._dead.discard(device)

    def _device_death(self, session: Session, device: str) -> None:
        session.publish("DDEATH", mapping.device_id(device), payload(()))
        self._dead.add(device)

    async def _forward(self, session: Session, stop: asyncio.Event) -> None:
        name, read_size = self.upstream.name, self.upstream.read_size
        after = 0
        ahead: asyncio.Task[Claimed] | None = None  # the next rows, read while these go out
        try:
            while not stop.is_set():
                self._inbox(session, births_done=True)
                await self._settle_due()
                await self._links(session)
                try:
                    if ahead is not None:
                        claimed, ahead = await ahead, None
                    else:
                        claimed = await self.outbox.claim_rows(name, read_size, after=after)
                except StoreError as exc:
                    ahead = None
                    self.state.last_error = f"store: {exc}"
                    await _wait(stop, 1.0)
                    continue
                if not claimed:
                    await self._idle(session, stop, self.window.next_due())
                    continue
                after = claimed.rows[-1][0]
                if len(claimed) == read_size:  # a backlog: claim the next rows meanwhile
                    ahead = asyncio.create_task(self.outbox.claim_rows(name, read_size, after=after))
                await self._publish_rows(session, claimed)
        finally:
            if ahead is not None:  # its attempts may be committed: the rows stay pending, no harm
                await asyncio.gather(ahead, return_exceptions=True)

    async def _publish_rows(self, session: Session, claimed: Claimed) -> None:
        sent: list[int] = []
        sends: list[tuple[int, int, int, int, str]] = []  # evidence: bdSeq and seq of each attempt
        refused: list[tuple[int, SendOutcome]] = []
        now = format_timestamp(datetime.now(UTC))
        bd = session.bd_seq
        try:
            for i, row in enumerate(claimed.rows):
                if i % 250 == 249:
                    await asyncio.sleep(0)
                entry = claimed.entry(row)
                try:
                    seq = await self._publish_row(session, entry)
                except ValueError as exc:  # no event (a ContractError among them): a dead letter
                    refused.append((entry.outbox_id, rejected(str(exc))))
                    continue
                sent.append(entry.outbox_id)
                sends.append((entry.outbox_id, entry.attempt, bd, seq, now))
        finally:
            # Written while the next rows go out (one write in hand at a time, in order).
            await self._evidence_written()
            self._writing = asyncio.create_task(self._evidence(sends))
        self.window.published(time.monotonic(), sent)
        self.state.published += len(sent)
        self.state.in_window = self.window.rows
        if refused:
            await self.outbox.settle(refused, now)
        await session.flow()

    async def _evidence_written(self) -> None:
        if self._writing is not None:
            writing, self._writing = self._writing, None
            await writing

    async def _evidence(self, sends: list[tuple[int, int, int, int, str]]) -> None:
        try:
            await self.db.record_sends(sends)
        except StoreError as exc:  # evidence only: the rows stay pending or are settled as usual
            self.state.last_error = f"store: {exc}"

    async def _publish_row(self, session: Session, entry: Entry) -> int:
        """Publish one row's DDATA (NDATA for a record of no device); its seq."""
        device = _device_of(entry)
        if device is not None and (device not in self._birthed or device in self._dead):
            await self._device_birth(session, device, dict(self.devices).get(device, ()))
        declared = self._birthed.get(device, frozenset()) if device is not None else frozenset()
        rm = mapping.row_metrics(
            entry,
            site=self.site,
            historical=False,
            declared=declared,
            gateway=self.gateway,
            store_id=self.store_id,
        )
        key = (rm.device, rm.metrics[-1].name)
        historical = entry.outbox_id <= self._mark or rm.event_ms <= self._last_ms.get(key, -1)
        self._last_ms[key] = max(rm.event_ms, self._last_ms.get(key, -1))
        body = payload(rm.metrics, historical=historical)
        if rm.device is None:
            return session.publish("NDATA", None, body)
        return session.publish("DDATA", mapping.device_id(rm.device), body)

    async def _settle_due(self) -> None:
        due = self.window.due(time.monotonic())
        if not due:
            return
        try:
            await self.outbox.settle(
                BatchOutcomes(due, [DELIVERED] * len(due)), format_timestamp(datetime.now(UTC))
            )
        except StoreError as exc:  # stays pending: sent again later, same ids (at least once)
            self.state.last_error = f"store: {exc}"
            return
        self.state.delivered += len(due)
        self.state.in_window = self.window.rows

    async def _links(self, session: Session) -> None:
        """DDEATH for a device whose PLC link was lost, a DBIRTH when it is back."""
        for device, channels in self.devices:
            up = self.link_up(device)
            if up is False and device not in self._dead:
                self._device_death(session, device)
            elif up is True and device in self._dead:
                await self._device_birth(session, device, channels)

    def _inbox(self, session: Session, *, births_done: bool) -> None:
        """Act on what came in: STATE of the primary host, NCMD. Raises _Break or _Rebirth."""
        session.arrived.clear()
        rebirth = False
        while not session.inbox.empty():
            topic_name, payload = session.inbox.get_nowait()
            if "/NCMD/" in topic_name:
                try:
                    rebirth = rebirth_requested(payload) or rebirth
                except DecodeError as exc:
                    self.state.bad_commands += 1
                    log.warning("sparkplug NCMD ignored: not a Sparkplug payload (%s)", exc)
                continue
            online = self._host.seen(topic_name, payload, v22=self.upstream.state_v22)
            self.state.primary_host_online = self._host.online
            if online is False and births_done:
                raise _Break("the primary host went offline", ndeath=True)
        if rebirth and births_done:
            raise _Rebirth()

    async def _idle(self, session: Session, stop: asyncio.Event, due: float | None) -> None:
        self._wake.clear()
        timeout = self.idle_poll_s if due is None else max(0.0, min(self.idle_poll_s, due - time.monotonic()))
        waits: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(session.arrived.wait()),
            asyncio.ensure_future(asyncio.shield(session.lost)),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if session.broken:
            raise SessionBroken("connection lost")

    def _failed(self, reason: str) -> float:
        st = self.state
        st.failures += 1
        if st.last_error != reason:
            log.warning("sparkplug upstream failing upstream=%s reason=%s", self.upstream.name, reason)
        st.last_error, st.up = reason, False
        b = self.upstream.backoff
        return retry_delay_s(st.failures, initial_s=b.initial_s, max_s=b.max_s, jitter=self.jitter())


def _device_of(entry: Entry) -> str | None:
    rec = entry.record
    if type(rec) is Transition or isinstance(rec, ChannelAnomaly):
        return device_of(rec.source)
    if isinstance(rec, BootObserved):
        return rec.device
    if isinstance(rec, IdentityIncomplete) and rec.source:
        return device_of(rec.source)
    return None


async def _wait(stop: asyncio.Event, delay: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)

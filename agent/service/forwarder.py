"""The forwarder: one task per upstream, draining its outbox in order through a sink.
Marks a row delivered only on the sink's proof; never decides what an event is (the store did).

Loop: claim the first pending rows (attempts + 1 committed first) -> encode -> publish -> settle
every row by its outcome in one transaction (which also claims the next rows when every row was
settled for good). Two batches are in hand at once (`agent.service.flight`), none published
before its claim is committed; memory holds two batches, however large the backlog. On any
`retry` the forwarder backs off and starts again from the head of the queue, so the first
arrival upstream stays in insertion order. `replayed` is true for an event sent again (attempt
> 1) and for the backlog waiting when the forwarder started or the upstream came back. With
receipts, an acknowledged row stays `sent` until the ledger's receipt (`agent.service.receipts`).
Stopping drains for at most `drain_s`; settling is never cancelled.

The loop step by step, `replayed`, receipts and stopping: docs/architecture.md, "The forwarder".
The sink for an upstream is `agent.service.upstream_sink.build_sink`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.config.upstreams import MqttUpstream, Upstream
from agent.core.errors import StoreError
from agent.core.retry import retry_delay_s
from agent.core.send_outcome import SendOutcome, Verdict, all_delivered, rejected, retry
from agent.core.timestamps import format_timestamp
from agent.service.flight import Drain, Flight, bounded, failed, publish_after, publish_beside, wait_or_stop
from agent.service.receipts import ReceiptKeeper
from agent.service.upstream_sink import Clock, system_clock
from agent.sinks.base import Sink
from agent.sinks.encode import EncodeError, encode, transition_row_encoder
from agent.store.outbox import BatchOutcomes
from agent.store.outbox_head import Claimed
from agent.store.store import Store

log = logging.getLogger(__name__)


@dataclass
class ForwarderState:
    """Live state of one forwarder, for status and metrics. Counts are of this run only."""

    upstream: str
    up: bool | None = None
    failures: int = 0
    last_error: str | None = None
    attempts: int = 0
    delivered: int = 0
    rejected: int = 0
    retried: int = 0


PIPELINE_DEPTH = 2  # batches claimed and in flight at once: the next read is ready when one settles
ENCODE_SLICE = 250  # rows encoded between two turns of the event loop


class Forwarder:
    """Drains one upstream's outbox through its sink. `await run(stop)` in a named task."""

    def __init__(
        self,
        store: Store,
        sink: Sink,
        upstream: Upstream,
        *,
        site: str,
        gateway: str,
        clock: Clock = system_clock,
        jitter: Callable[[], float] = random.random,
        idle_poll_s: float = 0.5,
    ) -> None:
        self.outbox = store.outbox
        self.store_id = store.store_id
        self.sink = sink
        self.upstream = upstream
        self.site = site
        self.gateway = gateway
        self.clock = clock
        self.jitter = jitter
        self.idle_poll_s = idle_poll_s
        self.state = ForwarderState(upstream.name)
        self._wake = asyncio.Event()
        self._replay_until = 0
        self._outage = False
        self.started = asyncio.Event()  # set once the backlog mark is taken and forwarding begins
        self._encode_row = transition_row_encoder(site, gateway, store.store_id)
        self._rewind = False
        self.receipts: ReceiptKeeper | None = None
        listen = getattr(sink, "listen_for_receipts", None)
        if isinstance(upstream, MqttUpstream) and upstream.receipts and listen is not None:
            self.receipts = ReceiptKeeper(
                store.outbox,
                upstream.name,
                store.store_id,
                gateway,
                upstream.receipt_timeout_s,
                clock,
                self.rewind,
            )
            listen(self.receipts.topic, self.receipts.on_receipt, self.receipts.on_connection)

    def rewind(self) -> None:
        """Rows went back to `pending` behind the claim cursor: look from the head of the queue
        once nothing is in flight."""
        self._rewind = True
        self._wake.set()

    def wake(self) -> None:
        """Tell the forwarder new rows were committed (it also polls every `idle_poll_s`)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event, *, drain_s: float = 5.0) -> None:
        """Forward until `stop` is set, then drain for at most `drain_s` seconds and return."""
        name = self.upstream.name
        self._replay_until = await self.outbox.last_pending_id(name)
        # From now on the record transaction commits the first attempt of this upstream's new rows
        # (agent.store.outbox `reserving`): a live batch needs no claim transaction.
        self.outbox.reserving.add(name)
        log.info("forwarder started upstream=%s backlog_until=%d", name, self._replay_until)
        self.started.set()
        keeper = None
        forwarded = asyncio.Event()  # the keeper's stop: it takes what came during the drain first
        if self.receipts is not None:
            keeper = asyncio.create_task(self.receipts.run(forwarded), name=f"receipts[{name}]")
        try:
            await self._forward(stop, drain_s)
        finally:
            if keeper is not None and self.receipts is not None:
                forwarded.set()
                self.receipts.on_wake()
                await asyncio.wait({keeper}, timeout=5.0)
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)
            self.outbox.reserving.discard(name)
        log.info("forwarder stopped upstream=%s", name)

    async def _forward(self, stop: asyncio.Event, drain_s: float) -> None:
        name = self.upstream.name
        drain = Drain(stop, drain_s)
        ahead: collections.deque[Flight] = collections.deque()
        after = 0  # the last row claimed: the next claim takes the rows after it
        claimed_none = False  # the claim made with the last settle found nothing: do not ask again at once
        try:
            while not drain.over():
                if self._rewind and not ahead:
                    self._rewind, after = False, 0
                if len(ahead) < PIPELINE_DEPTH and not claimed_none:
                    try:
                        entries = await self.outbox.claim_rows(name, self.upstream.read_size, after=after)
                    except StoreError as exc:
                        if not ahead:
                            await self._store_trouble(exc, stop)
                            continue
                        entries = Claimed([], {})  # settle what is in flight first
                    if entries:
                        after = entries.rows[-1][0]
                        flight = await self._encode(entries)
                        del entries
                        ahead.append(self._launch(flight, ahead[-1] if ahead else None))
                        continue
                claimed_none = False
                if not ahead:
                    after = 0  # idle: the next claim looks from the head (rows queued again by hand)
                    if stop.is_set():
                        break
                    await self._idle(stop)
                    continue
                delay, claimed = await self._finish(ahead.popleft(), drain, claim_after=after)
                if delay is None:
                    if claimed is not None and claimed.ids:
                        after = claimed.ids[-1]
                        ahead.append(self._launch(claimed, ahead[-1] if ahead else None))
                    claimed_none = claimed is not None and not claimed.ids
                    continue
                while ahead:  # what was sent behind the failed batch: settle it too
                    later, _ = await self._finish(ahead.popleft(), drain)
                    delay = max(delay, later or 0.0)
                after = 0  # again from the head of the queue, after the backoff
                if stop.is_set():
                    break
                if delay > 0:
                    await wait_or_stop(stop, delay)
        finally:
            for flight in ahead:  # the drain is over: these rows stay pending
                if flight.task is not None:
                    flight.task.cancel()
            await asyncio.gather(*(f.task for f in ahead if f.task is not None), return_exceptions=True)

    async def _encode(self, entries: Claimed) -> Flight:
        """Encode claimed rows into a batch (nothing sent yet). Yields to the loop every
        `ENCODE_SLICE` rows, so the store's statements of a settle running meanwhile (on its own
        thread) go on while this runs. A transition of claimed rows (`Claimed`) is encoded from its
        row; its entry is built only when its row is not in the common form, and every other
        row's is."""
        rows = entries.rows
        n = len(rows)
        flight = Flight([r[0] for r in rows], [None] * n, [], [], None)
        events, outcomes = flight.events, flight.outcomes
        append = events.append
        outage, until = self._outage, self._replay_until
        site, gateway, store_id = self.site, self.gateway, self.store_id
        fast, entry_of = self._encode_row, entries.entry
        refused = False
        # Every row of the batch waited in the backlog (or the upstream was out): all replayed.
        all_replayed = outage or (n > 0 and rows[-1][0] <= until)
        for start in range(0, n, ENCODE_SLICE):
            if start:
                await asyncio.sleep(0)
            for i in range(start, min(n, start + ENCODE_SLICE)):
                r = rows[i]
                replayed = all_replayed or r[2] > 0 or r[0] <= until  # attempts as stored: > 0 is a resend
                # A transition (kind None) whose record is there: from its row, when in the common form.
                event = fast(r, replayed) if r[1] is None and r[4] is not None else None
                if event is None:
                    try:
                        event = encode(
                            entry_of(r), site=site, gateway=gateway, replayed=replayed, store_id=store_id
                        )
                    except EncodeError as exc:
                        outcomes[i] = rejected(str(exc))
                        refused = True
                        continue
                append(event)
        flight.slots = [i for i, oc in enumerate(outcomes) if oc is None] if refused else list(range(n))
        return flight

    def _launch(self, flight: Flight, before: Flight | None) -> Flight:
        """Start publishing an encoded batch (behind `before` when the sink cannot overlap calls).
        Only for rows whose attempts are committed."""
        if flight.events:
            prev = before.task if before is not None else None
            if prev is None:
                publish = self.sink.publish(flight.events)
            elif getattr(self.sink, "overlapping", False) and getattr(self.sink, "connected", False):
                publish = publish_beside(self.sink, prev, flight.events)
            else:
                publish = publish_after(self.sink, prev, flight.events)
            flight.task = asyncio.create_task(publish, name=f"publish[{self.upstream.name}]")
        return flight

    async def _finish(
        self, flight: Flight, drain: Drain, *, claim_after: int | None = None
    ) -> tuple[float | None, Flight | None]:
        """Wait for a batch's outcomes and settle them; the delay before the next attempt (after
        which the forwarder starts again from the head of the queue), or None to go on. With
        `claim_after`, when every row is settled for good and the drain is not over, the next
        rows after that id are claimed in the same transaction and encoded while it is written
        and committed; they come back as a batch not yet published (no rows: an empty one; no
        claim made: None)."""
        outcomes: list[SendOutcome]
        published = None
        if flight.task is not None:
            published = await bounded(flight.task, len(flight.events), drain, self.upstream.name)
        if published is not None and len(published) == len(flight.ids):
            outcomes = published  # every row was encoded and published: outcomes in row order
        else:
            for i, oc in zip(flight.slots, published or (), strict=True):
                flight.outcomes[i] = oc
            outcomes = [oc if oc is not None else retry("not sent") for oc in flight.outcomes]
        results = BatchOutcomes(flight.ids, outcomes)
        del flight  # its rows and events can go before the next rows are encoded: two batches in memory
        now = format_timestamp(self.clock())
        claimed: Flight | None = None
        try:
            if claim_after is not None and not failed(outcomes) and not drain.over():
                up = self.upstream
                entries, claimed = await self.outbox.settle_and_claim_prepared(
                    results,
                    now,
                    up.name,
                    up.read_size,
                    after=claim_after,
                    prepare=self._encode,
                    receipts=self.receipts is not None,
                )
                if claimed is None:  # nothing was read
                    claimed = Flight([e.outbox_id for e in entries], [], [], [], None)
            else:
                await self.outbox.settle(results, now, receipts=self.receipts is not None)
        except StoreError as exc:
            # The store cannot be written (e.g. a full disk): these rows stay pending and are
            # sent again, same ids, once it can. At least once, never lost; the service goes on.
            # The rows claimed with them were not committed either: their batch is dropped.
            await self._store_trouble(exc, drain.stop)
            return 0.0, None
        return await self._account(outcomes), claimed

    async def _store_trouble(self, exc: StoreError, stop: asyncio.Event) -> None:
        """Say it once per change, then wait a second (or until stopping) and try again."""
        text = f"store: {exc}"
        if self.state.last_error != text:
            log.error("forwarder cannot use the store upstream=%s error=%s", self.upstream.name, exc)
        self.state.last_error = text
        await wait_or_stop(stop, 1.0)

    async def _account(self, outcomes: list[SendOutcome]) -> float | None:
        """Update state and logs; the delay before the next attempt, or None to go on at once."""
        st = self.state
        st.attempts += len(outcomes)
        if all_delivered(outcomes):
            st.delivered += len(outcomes)
            await self._upstream_up()
            return None
        st.delivered += sum(1 for o in outcomes if o.verdict is Verdict.DELIVERED)
        for o in outcomes:
            if o.verdict is Verdict.REJECTED:
                st.rejected += 1
                log.error("dead letter upstream=%s reason=%r", self.upstream.name, o.reason)
        retries = [o for o in outcomes if o.verdict is Verdict.RETRY]
        if not retries:
            await self._upstream_up()
            return None
        return self._upstream_failing(retries)

    async def _upstream_up(self) -> None:
        """After an outage, the backlog as it stands now is sent as replayed."""
        st = self.state
        if self._outage or st.failures:
            backlog_end = await self.outbox.last_pending_id(self.upstream.name)
            self._replay_until = max(self._replay_until, backlog_end)
            log.warning(
                "upstream back upstream=%s after_failures=%d backlog_until=%d",
                self.upstream.name,
                st.failures,
                self._replay_until,
            )
        self._outage, st.failures, st.up = False, 0, True

    def _upstream_failing(self, retries: Sequence[SendOutcome]) -> float:
        """Count the failure, say it once per outage; the backoff before the next attempt."""
        st = self.state
        st.retried += len(retries)
        st.failures += 1
        st.last_error = retries[0].reason
        if st.up is not False:
            log.warning("upstream failing upstream=%s reason=%r", self.upstream.name, st.last_error)
        else:
            log.debug("upstream still failing upstream=%s reason=%r", self.upstream.name, st.last_error)
        st.up, self._outage = False, True
        b = self.upstream.backoff
        after = max((o.retry_after_s for o in retries if o.retry_after_s is not None), default=None)
        return retry_delay_s(
            st.failures, initial_s=b.initial_s, max_s=b.max_s, jitter=self.jitter(), retry_after_s=after
        )

    async def _idle(self, stop: asyncio.Event) -> None:
        self._wake.clear()
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(self._wake.wait())]
        try:
            await asyncio.wait(waits, timeout=self.idle_poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

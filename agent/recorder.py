"""The recorder: the one task that turns observations into store transactions (group commit).

Sources ``submit`` observations into a bounded queue; one task takes whatever is queued
(up to ``max_batch`` deliveries) and records it in one ``Store.record`` call, so throughput
comes from batching, not from weaker durability, and at most one transaction is in flight.
While a commit runs, new observations queue up and form the next batch by themselves: there
is no timer to tune, and a single observation is committed at once when nothing else waits.

Boot ids read from a controller (``BootSeen``) go into the same transaction as the batch;
the store takes them before the boots that deliveries carry, so a BootObserved record keeps
the real evidence (register or node, previous value, OPC UA StartTime) rather than "first
seen in a live delivery".

Shutdown: set ``stop`` after the pollers have stopped; ``run`` commits what is queued and
returns. A StoreError ends ``run`` (the service decides; observations not committed are
re-read from the controllers after a restart).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from agent.contract import Delivery, format_timestamp
from agent.store.decide import BootSighting, Outcome
from agent.store.store import Store
from agent.transitions import Observations

log = logging.getLogger(__name__)

CommitHook = Callable[[Sequence[Observations], Sequence[Outcome]], None]


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


@dataclass
class RecorderStats:
    batches: int = 0
    deliveries: int = 0
    boots: int = 0
    anomalies: int = 0


class Recorder:
    """Implements the sources' ``ObservationSink``. Build with a store; run ``run(stop)`` as one task."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 2000,
        queue_size: int = 10_000,
        on_commit: CommitHook | None = None,
        clock: Callable[[], str] = _now,
    ) -> None:
        self.store = store
        self.max_batch = max_batch
        self.on_commit = on_commit
        self.clock = clock
        self.stats = RecorderStats()
        self._queue: asyncio.Queue[Observations] = asyncio.Queue(queue_size)

    async def submit(self, obs: Observations) -> None:
        """Queue one poll's observations; waits only when the store is far behind."""
        await self._queue.put(obs)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def run(self, stop: asyncio.Event) -> None:
        """Commit batches until ``stop`` is set and the queue is empty."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while True:
                if self._queue.empty():
                    if stop.is_set():
                        return
                    getter = asyncio.ensure_future(self._queue.get())
                    await asyncio.wait({getter, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    if not getter.done():
                        getter.cancel()
                        continue
                    batch = [getter.result()]
                else:
                    batch = [self._queue.get_nowait()]
                size = len(batch[0].deliveries)
                while not self._queue.empty() and size < self.max_batch:
                    obs = self._queue.get_nowait()
                    batch.append(obs)
                    size += len(obs.deliveries)
                await self.commit(batch)
        finally:
            stopping.cancel()

    async def commit(self, batch: Sequence[Observations]) -> list[Outcome]:
        """Record one batch in one transaction. Returns the outcomes."""
        deliveries: list[Delivery] = [d for obs in batch for d in obs.deliveries]
        anomalies = [a for obs in batch for a in obs.anomalies]
        sightings = [
            BootSighting(b.device, b.boot_id, b.seen_at, b.source_ts, b.live, dict(b.evidence))
            for obs in batch
            for b in obs.boots
        ]
        outcomes: list[Outcome] = []
        if deliveries or anomalies or sightings:
            outcomes = await self.store.record(
                deliveries, boot_sightings=sightings, anomalies=anomalies, now=self.clock()
            )
        self.stats.batches += 1
        self.stats.deliveries += len(deliveries)
        self.stats.boots += len(sightings)
        self.stats.anomalies += len(anomalies)
        if anomalies:
            for a in anomalies:
                log.warning(
                    "%s source=%s boot_id=%s from=%s to=%s", a.kind, a.source, a.boot_id, a.first, a.last
                )
        if self.on_commit is not None:
            self.on_commit(batch, outcomes)
        return outcomes

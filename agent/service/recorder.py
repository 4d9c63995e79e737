"""The recorder: the one task that turns observations into store transactions (group commit).
It never decides a delivery itself (the store does) and never drops a batch it was given.

Sources ``submit`` observations into a bounded queue; one task records whatever is queued (up
to ``max_batch`` deliveries) in one ``Store.record`` call, at most one transaction in flight.
Commits begin at least ``min_interval_s`` apart (`store.commit_interval`, default 50 ms): a
commit costs about as much CPU as several polls whatever its size, and each writes whole pages
to the flash; the price is at most one interval more before a transition is committed.
Shutdown never waits for the interval. Boot sightings go into the batch's transaction, before
the boots deliveries carry, so a BootObserved record keeps the real evidence. While the store
cannot be written the batch is held and retried (``_commit_retrying``). The figures and
reasons: docs/architecture.md, "The recorder".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from agent.core.contract import Delivery
from agent.core.decide import Outcome
from agent.core.errors import StoreCorrupt, StoreError, StoreFull
from agent.core.snapshot import Observations
from agent.core.timestamps import format_timestamp
from agent.store.store import Store

log = logging.getLogger(__name__)

CommitHook = Callable[[Sequence[Observations], Sequence[Outcome]], None]


class WhenFull(Protocol):
    """What the service keeps for a full store (`agent.service.room.StoreRoom`)."""

    async def full(self) -> None:
        """The store refused a write as full: give back what is kept for the must-commit writes."""

    def may_write(self) -> bool:
        """False while new observations would only fill what was given back."""

    async def last_chance(self) -> None:
        """At shutdown, with observations held: open everything kept, for one last commit."""

    async def recovered(self) -> None:
        """The store took writes again: keep room again when there is some."""


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


@dataclass
class RecorderStats:
    batches: int = 0
    deliveries: int = 0
    boots: int = 0
    anomalies: int = 0
    store_errors: int = 0
    lost: int = 0  # observations given up at shutdown (store full, or cut short): never silent


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
        retry_s: float = 1.0,
        room: WhenFull | None = None,
        min_interval_s: float = 0.05,
    ) -> None:
        self.store = store
        self.max_batch = max_batch
        self.on_commit = on_commit
        self.clock = clock
        self.stats = RecorderStats()
        self.retry_s = retry_s
        self._commit_started: float | None = None
        self.min_interval_s = min_interval_s
        self._last_began = -math.inf  # when the last commit began (monotonic)
        self.store_problem: str | None = None
        self.room = room
        self._queued = 0  # observations in the queue
        self._full = asyncio.Event()  # set when a whole batch is queued
        self._queue: asyncio.Queue[Observations] = asyncio.Queue(queue_size)
        self._held: list[Observations] | None = None  # a batch whose commit failed unexpectedly
        self._handed = 0  # polls' observations submitted, ever
        self._settled = 0  # of those, committed or given up at a stop (in the order submitted)
        self._settle_waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def submit(self, obs: Observations) -> None:
        """Queue one poll's observations; waits only when the store is far behind. A poller
        cancelled while it waits here (a stop cut short) has its observations counted as lost."""
        try:
            await self._queue.put(obs)
        except asyncio.CancelledError:
            self.stats.lost += _count(obs)
            raise
        self._queued += _count(obs)
        self._handed += 1
        if self._queued >= self.max_batch:
            self._full.set()  # a full batch does not wait for the rest of the commit interval

    async def caught_up(self) -> None:
        """Until everything submitted before this call is committed (or given up at a stop): a
        reload reads a restarted device's positions from the store after this."""
        target = self._handed
        if self._settled >= target:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._settle_waiters.append((target, waiter))
        await waiter

    def _settle(self, batch: Sequence[Observations]) -> None:
        self._settled += len(batch)
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in self._settle_waiters:
            if target <= self._settled:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((target, waiter))
        self._settle_waiters = still

    def uncommitted(self) -> int:
        """Observations accepted and not committed: the queue and the batch in hand."""
        held = sum(_count(o) for o in self._held) if self._held is not None else 0
        return held + self._queued

    def healthy(self, max_commit_s: float) -> bool:
        """False when one commit has been running for more than `max_commit_s` (a stuck store)."""
        started = self._commit_started
        return started is None or time.monotonic() - started < max_commit_s

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def run(self, stop: asyncio.Event) -> None:
        """Commit batches until ``stop`` is set and the queue is empty."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            if self._held is not None:  # restarted by the supervisor: that batch first, not lost
                await self._commit_retrying(self._held, stop)
            while True:
                await self._pause(stop, stopping)
                first = await self._first(stop, stopping)
                if first is None:
                    if stop.is_set() and self._queue.empty():
                        return
                    continue
                await self._commit_retrying(self._batch_from(first), stop)
        finally:
            stopping.cancel()

    async def _pause(self, stop: asyncio.Event, stopping: asyncio.Future[Any]) -> None:
        """Until `min_interval_s` after the last commit began (observations queue meanwhile), a
        whole batch is queued, or stop."""
        wait = self._last_began + self.min_interval_s - time.monotonic()
        if wait > 0 and not stop.is_set() and self._queued < self.max_batch:
            self._full.clear()
            full = asyncio.ensure_future(self._full.wait())
            try:
                await asyncio.wait((stopping, full), timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                full.cancel()

    async def _first(self, stop: asyncio.Event, stopping: asyncio.Future[Any]) -> Observations | None:
        """The next queued observations, waiting for them; None when woken by ``stop``."""
        if not self._queue.empty():
            return self._took(self._queue.get_nowait())
        if stop.is_set():
            return None
        getter = asyncio.ensure_future(self._queue.get())
        await asyncio.wait({getter, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            return None
        return self._took(getter.result())

    def _took(self, obs: Observations) -> Observations:
        self._queued -= _count(obs)
        return obs

    def _batch_from(self, first: Observations) -> list[Observations]:
        """`first` and whatever else is queued, up to ``max_batch`` deliveries (group commit)."""
        batch = [first]
        size = len(first.deliveries)
        while not self._queue.empty() and size < self.max_batch:
            obs = self._took(self._queue.get_nowait())
            batch.append(obs)
            size += len(obs.deliveries)
        return batch

    async def _commit_retrying(self, batch: Sequence[Observations], stop: asyncio.Event) -> None:
        """Commit, and while the store cannot be written (disk or quota full, locked), keep the
        batch in memory and retry every `retry_s` seconds: the queue fills, pollers wait on
        `submit`, and the controllers' ring buffers are the backstop. Said loudly once per
        change of problem; resumes by itself when space is freed. A full store first gives back
        its reserve (`room`) for the writes that must commit, and the recorder retries only
        when there is more room than that. At shutdown the reserve is opened for one last
        commit; what still does not commit is counted as lost (the service then exits non-zero)."""
        # Until committed: an unexpected exception keeps it for the restart, and a stop that
        # cancels this task leaves it counted as uncommitted.
        self._held = list(batch)
        last_chance = False
        while True:
            self._commit_started = self._last_began = time.monotonic()
            try:
                await self.commit(batch)
            except StoreCorrupt:
                raise  # fatal: the service stops and the damaged store is moved aside at the next start
            except StoreError as exc:
                self._failed(batch, exc)
                if isinstance(exc, StoreFull) and self.room is not None:
                    await self.room.full()
                if stop.is_set():
                    if isinstance(exc, StoreFull) and self.room is not None and not last_chance:
                        last_chance = True
                        await self.room.last_chance()
                        continue
                    held = sum(_count(o) for o in batch)
                    self.stats.lost += held
                    log.error(
                        "shutting down with %d uncommitted observations, lost to this store "
                        "(the controllers' ring buffers may still hold them): %s",
                        held,
                        exc,
                    )
                    self._held = None
                    self._settle(batch)
                    return
                await self._wait_for_room(stop)
                continue
            finally:
                self._commit_started = None
            self._held = None
            self._settle(batch)
            if self.store_problem is not None:
                log.warning("store writable again after %d failed attempts", self.stats.store_errors)
                self.store_problem = None
                if self.room is not None:
                    await self.room.recovered()
            return

    def _failed(self, batch: Sequence[Observations], exc: StoreError) -> None:
        self.stats.store_errors += 1
        if self.store_problem != str(exc):
            n = sum(len(o.deliveries) for o in batch)
            log.error("store write failed; holding %d deliveries and retrying: %s", n, exc)
        self.store_problem = str(exc)

    async def _wait_for_room(self, stop: asyncio.Event) -> None:
        """Wait `retry_s`, and longer while the room says new writes would only fill the reserve."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_s)
            if stop.is_set() or self.room is None or self.room.may_write():
                return

    async def commit(self, batch: Sequence[Observations]) -> list[Outcome]:
        """Record one batch in one transaction. Returns the outcomes."""
        deliveries: list[Delivery] = [d for obs in batch for d in obs.deliveries]
        anomalies = [a for obs in batch for a in obs.anomalies]
        sightings = [b for obs in batch for b in obs.boots]
        positions = [obs.positions for obs in batch if obs.positions is not None]
        outcomes: list[Outcome] = []
        if deliveries or anomalies or sightings or positions:
            outcomes = await self.store.record(
                deliveries,
                boot_sightings=sightings,
                anomalies=anomalies,
                positions=positions,
                now=self.clock(),
            )
        self.stats.batches += 1
        self.stats.deliveries += len(deliveries)
        self.stats.boots += len(sightings)
        self.stats.anomalies += len(anomalies)
        if self.on_commit is not None:
            self.on_commit(batch, outcomes)
        return outcomes


def _count(obs: Observations) -> int:
    """What one poll handed over: deliveries, boot sightings and anomalies."""
    return len(obs.deliveries) + len(obs.boots) + len(obs.anomalies)

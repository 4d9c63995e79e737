"""The intake's one connection to PostgreSQL: commit a batch, or say that PostgreSQL is away.

Intakes (HTTP requests, MQTT batches) hand whole batches to `Writer.record`, one at a time
(a lock; the arbitration is set-based, so a batch is one round of a few statements whatever
its size). When PostgreSQL is unreachable `record` raises LedgerUnavailable at once (HTTP
answers 503, MQTT keeps the messages unacknowledged); the next call tries to reconnect, at most
once per backoff step, so a down server is not hammered. The schema is migrated on the first
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from agent.core.decide import Outcome
from agent.ledger import arbiter, metrics, migrations
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.connection import connect, describe
from agent.ledger.errors import LedgerUnavailable

log = logging.getLogger(__name__)

BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)


class Writer:
    """One connection, one batch at a time, reconnect with capped backoff."""

    def __init__(
        self,
        dsn: str | None,
        *,
        password: str | None = None,
        rules: Sequence[NotifyRule] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dsn = dsn
        self._rules = tuple(rules)
        self._password = password
        self._clock = clock
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._next_try = 0.0
        self.retry_after_s = BACKOFF_S[0]

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def _ensure(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        now = self._clock()
        if now < self._next_try:
            raise LedgerUnavailable(f"PostgreSQL {describe(self._dsn)} is unavailable; retrying")
        try:
            conn = await connect(self._dsn, password=self._password)
            await migrations.migrate(conn)
        except LedgerUnavailable:
            self._failed()
            raise
        if self._failures:
            log.warning("PostgreSQL reachable again after %d failed attempts", self._failures)
        self._failures = 0
        self._conn = conn
        return conn

    def _failed(self) -> None:
        step = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
        self._failures += 1
        self._next_try = self._clock() + step
        self.retry_after_s = step
        if self._failures == 1:
            log.warning("PostgreSQL %s unavailable: intake stops acknowledging", describe(self._dsn))

    async def connect_now(self) -> None:
        """Connect (and migrate) unless connected; LedgerUnavailable when PostgreSQL is away."""
        async with self._lock:
            await self._ensure()

    async def record(self, batch: Sequence[Arrival]) -> list[Outcome]:
        """Commit one batch and return its outcomes, or raise LedgerUnavailable (nothing kept)."""
        async with self._lock:
            try:
                conn = await self._ensure()
                t0 = time.perf_counter()
                try:
                    outcomes = await arbiter.record(conn, batch, rules=self._rules)
                except LedgerUnavailable:
                    await self._drop()
                    self._failed()
                    raise
            except Exception as exc:
                metrics.failed(batch, type(exc).__name__)
                raise
            metrics.committed(batch, outcomes, time.perf_counter() - t0)
            return outcomes

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
            self._conn = None

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

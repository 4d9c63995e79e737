"""The intake's one connection to PostgreSQL: commit a batch, or say that PostgreSQL is away.

Intakes (HTTP requests, MQTT batches) hand whole batches to `Writer.record`, one at a time
(a lock; the arbitration is set-based, so a batch is one round of a few statements whatever
its size). When PostgreSQL is unreachable `record` raises LedgerUnavailable at once (HTTP
answers 503, MQTT keeps the messages unacknowledged); the next call tries to reconnect, at most
once per backoff step, so a down server is not hammered. The schema is migrated on the first
connection. An outage is logged once when it starts (with libpq's or the server's reason) and
once when it ends; every (re)connection logs the replication state it finds (a failover lands
on another server). With `require_sync_standby` a batch is refused (LedgerUnavailable, nothing
written, nothing acknowledged) while the server has no synchronous standby streaming; the state
is read again at most once a second while it is good and before every batch while it is not.
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
from agent.ledger import arbiter, failover, metrics, migrations
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.connection import connect, describe
from agent.ledger.errors import LedgerUnavailable

log = logging.getLogger(__name__)

BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
SYNC_CHECK_S = 1.0  # how long a good replication state is trusted
SYNC_RETRY_S = 1.0


class Writer:
    """One connection, one batch at a time, reconnect with capped backoff."""

    def __init__(
        self,
        dsn: str | None,
        *,
        password: str | None = None,
        rules: Sequence[NotifyRule] = (),
        clock: Callable[[], float] = time.monotonic,
        require_sync_standby: bool = False,
        horizon_s: float | None = None,
        keys_s: float | None = None,
    ) -> None:
        self._dsn = dsn
        self.rules = tuple(rules)  # replaced by a reload; read once per batch
        self.horizon_s = horizon_s  # the identity horizon (`retention:`); None: none
        self.keys_s = keys_s  # arrival keys looked up over this period (`retention.arrivals`); None: ever
        self._password = password
        self._clock = clock
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._next_try = 0.0
        self.retry_after_s = BACKOFF_S[0]
        self.require_sync_standby = require_sync_standby
        self._sync_good_until = 0.0
        self._withholding = False
        self.replication: failover.ReplicationState | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def _ensure(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        now = self._clock()
        if now < self._next_try:
            raise LedgerUnavailable(f"PostgreSQL {describe(self._dsn)} is unavailable; retrying")
        conn = None
        try:
            conn = await connect(self._dsn, password=self._password)
            await migrations.migrate(conn)
            state = await failover.replication_state(conn)
        except (LedgerUnavailable, psycopg.Error) as exc:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
            if isinstance(exc, psycopg.Error) and not failover.unavailable(exc):
                raise
            self._failed(exc)
            if isinstance(exc, LedgerUnavailable):
                raise
            raise LedgerUnavailable(f"PostgreSQL {describe(self._dsn)}: {exc}") from exc
        if self._failures:
            log.warning("PostgreSQL reachable again after %d failed attempts", self._failures)
        self._failures = 0
        self._sync_good_until = 0.0  # perhaps another server now: read its replication state again
        self._conn = conn
        self._note_replication(state)
        return conn

    def _note_replication(self, state: failover.ReplicationState) -> None:
        self.replication = state
        failover.GAUGES.sync_standby_ok = 1.0 if state.sync_ok else 0.0
        info = conn_info(self._conn)
        if state.sync_ok:
            log.info("replication on %s: %s", info, state.describe())
        else:
            log.warning("replication on %s: %s", info, state.describe())

    def _failed(self, exc: BaseException | None = None) -> None:
        step = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
        self._failures += 1
        self._next_try = self._clock() + step
        self.retry_after_s = step
        if self._failures == 1:
            failover.GAUGES.outages += 1
            log.warning(
                "PostgreSQL %s unavailable: intake stops acknowledging until it is back (%s)",
                describe(self._dsn),
                exc if exc is not None else "no reason given",
            )

    async def _require_sync(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        """Refuse the batch (LedgerUnavailable) while no synchronous standby streams."""
        now = self._clock()
        if now < self._sync_good_until:
            return
        state = await failover.replication_state(conn)
        self.replication = state
        failover.GAUGES.sync_standby_ok = 1.0 if state.sync_ok else 0.0
        if state.sync_ok:
            self._sync_good_until = now + SYNC_CHECK_S
            if self._withholding:
                self._withholding = False
                log.warning("require_sync_standby: a synchronous standby streams again: acknowledging")
            return
        failover.GAUGES.sync_standby_refusals += 1
        self.retry_after_s = SYNC_RETRY_S
        if not self._withholding:
            self._withholding = True
            log.warning(
                "require_sync_standby: the primary has no synchronous standby (%s):"
                " acknowledgements withheld until one streams",
                state.describe(),
            )
        raise LedgerUnavailable("require_sync_standby: the primary has no synchronous standby streaming")

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
                    if self.require_sync_standby:
                        try:
                            await self._require_sync(conn)
                        except psycopg.Error as exc:
                            if not failover.unavailable(exc):
                                raise
                            raise LedgerUnavailable(f"PostgreSQL: {exc}") from exc
                    outcomes = await arbiter.record(
                        conn, batch, rules=self.rules, horizon_s=self.horizon_s, keys_s=self.keys_s
                    )
                except LedgerUnavailable as exc:
                    if self._withholding and conn is self._conn and not conn.closed:
                        raise  # the server is there; the standby is not: keep the connection
                    await self._drop()
                    self._failed(exc)
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


def conn_info(conn: psycopg.AsyncConnection[tuple[Any, ...]] | None) -> str:
    """host:port of the server a connection reached (the one a multi-host DSN chose)."""
    if conn is None or conn.closed:
        return "(not connected)"
    return f"{conn.info.host}:{conn.info.port}"

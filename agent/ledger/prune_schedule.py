"""`ledger run` prunes every `retention.every` (the first one a short while after the start):
one prune at a time (this loop runs them one after the other; the database lock keeps a second
instance's out), each on a connection of its own, logged. A failed prune (the archive could not
be written, PostgreSQL away) is logged and tried again at the next turn; it never stops the
ledger. Before each prune, and at the start and every hour with or without `retention:`
(`partitions_every`), the time partitions ahead are made (`agent.ledger.time_partitions`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from agent.ledger.archive import ArchiveError
from agent.ledger.errors import LedgerError, LedgerUnavailable
from agent.ledger.retention_config import RetentionSettings

log = logging.getLogger(__name__)

FIRST_AFTER_S = 30.0
PARTITIONS_EVERY_S = 3600.0


async def partitions_every(
    dsn: str | None,
    password: str | None,
    period: str,
    ahead: int,
    stop: asyncio.Event,
    every_s: float = PARTITIONS_EVERY_S,
) -> None:
    """Until `stop`: the time partitions ahead now, then every `every_s`."""
    while not stop.is_set():
        await keep_partitions(dsn, password, period, ahead)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)


async def keep_partitions(dsn: str | None, password: str | None, period: str, ahead: int) -> None:
    """Once: the current and the next `ahead` periods' partitions; a failure is logged (rows
    go to the DEFAULT partition meanwhile: nothing is refused)."""
    from agent.ledger import time_partitions

    async with _connected(dsn, password, "time partitions not made now") as conn:
        if conn is None:
            return
        try:
            await time_partitions.ensure(conn, period, ahead)
        except (LedgerError, psycopg.Error) as exc:
            log.error("time partitions not made now: %s", exc)


async def prune_every(
    dsn: str | None,
    password: str | None,
    settings: RetentionSettings,
    stop: asyncio.Event,
    first_after_s: float = FIRST_AFTER_S,
) -> None:
    """Until `stop`: wait, prune once, repeat."""
    wait = min(first_after_s, settings.every_s)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait)
        if stop.is_set():
            return
        wait = settings.every_s
        await keep_partitions(dsn, password, settings.partition, settings.partitions_ahead)
        await prune_once(dsn, password, settings)


async def prune_once(dsn: str | None, password: str | None, settings: RetentionSettings) -> None:
    from agent.ledger import prune

    async with _connected(dsn, password, "scheduled prune skipped") as conn:
        if conn is None:
            return
        try:
            result = await prune.prune(conn, settings)
            done = ", ".join(f"{s.table} {s.pruned}" for s in result.steps)
            log.info("scheduled prune run=%s done: pruned %s", result.run_id, done)
        except prune.PruneBusy as exc:
            log.info("scheduled prune skipped: %s", exc)
        except ArchiveError as exc:
            log.error("scheduled prune stopped, the archive failed (nothing more deleted): %s", exc)
        except (LedgerError, psycopg.Error) as exc:
            log.error("scheduled prune failed: %s", exc)


@contextlib.asynccontextmanager
async def _connected(dsn: str | None, password: str | None, unavailable: str) -> AsyncIterator[Any]:
    """A connection of its own, closed after; None (logged with `unavailable`) when PostgreSQL
    cannot be reached."""
    from agent.ledger.connection import connect

    try:
        conn = await connect(dsn, password=password)
    except LedgerUnavailable as exc:
        log.warning("%s: %s", unavailable, exc)
        yield None
        return
    try:
        yield conn
    finally:
        with contextlib.suppress(psycopg.Error):
            await conn.close()

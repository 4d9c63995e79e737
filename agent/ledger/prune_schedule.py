"""`ledger run` prunes every `retention.every` (the first one a short while after the start):
one prune at a time (this loop runs them one after the other; the database lock keeps a second
instance's out), each on a connection of its own, logged. A failed prune (the archive could not
be written, PostgreSQL away) is logged and tried again at the next turn; it never stops the
ledger."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from agent.ledger.archive import ArchiveError
from agent.ledger.errors import LedgerError, LedgerUnavailable
from agent.ledger.retention_config import RetentionSettings

log = logging.getLogger(__name__)

FIRST_AFTER_S = 30.0


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
        await prune_once(dsn, password, settings)


async def prune_once(dsn: str | None, password: str | None, settings: RetentionSettings) -> None:
    from agent.ledger import prune
    from agent.ledger.connection import connect

    try:
        conn = await connect(dsn, password=password)
    except LedgerUnavailable as exc:
        log.warning("scheduled prune skipped: %s", exc)
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
    finally:
        with contextlib.suppress(psycopg.Error):
            await conn.close()

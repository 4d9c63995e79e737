"""The store's read side: `await Reader.open(path)` on its own read-only SQLite connection.

Reports, boots, pending, live state, outbox counts, the prune plan, the size budget and what
pollers need at start. Opened with `mode=ro`: it never creates, migrates, writes or locks a store.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from agent.config.retention import RetentionSettings
from agent.core.tracker import Resume
from agent.store import budget, live_file, positions, report, review
from agent.store.connection import open_reader
from agent.store.outbox_counts import UpstreamCounts, upstream_counts
from agent.store.prune_plan import StagePlan, plan_on


class Reader:
    """Read-only queries of one existing store. Close with `await close()` (or `async with`)."""

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self.path = path

    @classmethod
    async def open(cls, path: str | Path) -> Reader:
        """StoreMissing (naming the path, creating nothing) when there is no store at `path`."""
        return cls(await open_reader(path), str(path))

    async def close(self) -> None:
        await self._db.close()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the report ---------------------------------------------------------------

    async def summary(self) -> dict[str, int]:
        return await report.summary(self._db)

    def events(self, sort: str = "id") -> AsyncGenerator[dict[str, Any], None]:
        return report.events(self._db, sort)

    def arrivals(self) -> AsyncGenerator[dict[str, Any], None]:
        return report.arrivals(self._db)

    def boots(self) -> AsyncGenerator[dict[str, Any], None]:
        return report.boots(self._db)

    def anomalies(self, *, gaps: bool) -> AsyncGenerator[dict[str, Any], None]:
        return report.anomalies(self._db, gaps=gaps)

    def pending(self) -> AsyncGenerator[dict[str, Any], None]:
        return report.pending(self._db)

    # --- review -------------------------------------------------------------------

    def conflicts(self, *, open_only: bool = False) -> AsyncGenerator[dict[str, Any], None]:
        """Conflict arrivals beside their canonical, with review marks (`review conflicts`)."""
        return review.conflicts(self._db, open_only=open_only)

    def pending_review(self, *, open_only: bool = False) -> AsyncGenerator[dict[str, Any], None]:
        """Identity-incomplete arrivals with their raw evidence and review marks (`review pending`)."""
        return review.pending(self._db, open_only=open_only)

    # --- the running service and the outbox ------------------------------------------

    async def live_state(self, name: str) -> tuple[str, str] | None:
        """(updated_at, state JSON) of `name`, or None when no service has written it: from the
        file in memory the store names (`agent.store.live_file`), else from the store."""
        if name == "service":
            try:
                named = list(
                    await self._db.execute_fetchall(
                        "SELECT value FROM store_meta WHERE name = ?", (live_file.META_KEY,)
                    )
                )
            except sqlite3.OperationalError:  # a store older than store_meta
                named = []
            if named:
                return await asyncio.to_thread(live_file.read, str(named[0][0]))
        found = list(
            await self._db.execute_fetchall(
                "SELECT updated_at, state FROM live_state WHERE name = ?", (name,)
            )
        )
        return (str(found[0][0]), str(found[0][1])) if found else None

    async def outbox_counts(self) -> list[UpstreamCounts]:
        return await upstream_counts(self._db)

    async def last_live_boots(self) -> dict[str, str]:
        """Per device, the latest boot id first seen live (where a poller resumes from)."""
        found = await self._db.execute_fetchall(
            "SELECT device, last_live_boot FROM device_state WHERE last_live_boot IS NOT NULL"
        )
        return {str(r[0]): str(r[1]) for r in found}

    async def resume_points(self, devices: Iterable[str]) -> dict[str, Resume]:
        """Per device, where its pollers resume: last live boot, last transitionIds, ring head."""
        return await positions.resume_points(self._db, devices)

    # --- retention and size -----------------------------------------------------------

    async def prune_plan(self, settings: RetentionSettings, now: datetime) -> dict[str, StagePlan]:
        """What `prune` would remove at `now` and why the rest of the old data stays."""
        return await plan_on(self._db, settings, now)

    async def measure(self, now: datetime, max_bytes: int | None = None) -> budget.SizeFacts:
        return await budget.measure_on(self._db, self.path, now, max_bytes)

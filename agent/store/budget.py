"""The store's size budget: how big it is, how much room is left, how many days of history fit.

`measure()` reads the facts (file sizes, SQLite page counts, `os.statvfs` of
the store's filesystem, arrivals of the last days); `assess()` is pure and
turns them into what `status` and metrics show. The budget is the configured
quota (`store.max_size`) when there is one, else what the filesystem could
still give the store; the warning fires at `high_water` of it, long before
SQLite reports the disk full. Measuring only reads; it runs on the writer's
connection (under its lock) or on a reader's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent.core.timestamps import format_timestamp
from agent.core.wording import days_ahead

if TYPE_CHECKING:
    from agent.store.store import Store

RATE_WINDOW = timedelta(days=7)
WAL_ROOM = 1024 * 1024
"""Below this much free space on its filesystem the store counts as full whatever pages are free
inside the file: every commit first grows the WAL, which lives on the filesystem."""


async def _all(db: aiosqlite.Connection, sql: str, params: Any = ()) -> list[Any]:
    return list(await db.execute_fetchall(sql, params))


@dataclass(frozen=True, slots=True)
class SizeFacts:
    """Measured; `rows` counts arrivals + canonical events + key records."""

    store_bytes: int  # database file + WAL
    free_pages_bytes: int  # inside the file, reusable without growing it
    fs_free_bytes: int  # available to this user on the store's filesystem
    fs_total_bytes: int
    max_bytes: int | None  # the configured quota, if any
    rows: int
    arrivals_in_window: int
    window_days: float


@dataclass(frozen=True, slots=True)
class Budget:
    store_bytes: int
    budget_bytes: int
    used_share: float
    fs_free_bytes: int
    bytes_per_day: float | None  # None: no arrivals in the rate window
    days_that_fit: float | None  # days of history the whole budget holds at this rate
    days_until_full: float | None  # if nothing were pruned; 0 when the filesystem is full now
    warning: str | None


def assess(f: SizeFacts, high_water: float, keep_days: float | None = None) -> Budget:
    """Pure: the budget, the growth rate at the current arrival rate and the warning, if any.

    `keep_days` is the payload horizon: a budget that holds fewer days of
    history than that will fill up before retention frees anything.
    """
    live = max(f.store_bytes - f.free_pages_bytes, 0)
    room = f.fs_free_bytes + f.store_bytes
    budget = min(f.max_bytes, room) if f.max_bytes is not None else room
    share = live / budget if budget > 0 else 1.0
    per_row = live / f.rows if f.rows else 0.0
    rate = (
        per_row * f.arrivals_in_window / f.window_days if f.arrivals_in_window and f.window_days > 0 else None
    )
    fit = budget / rate if rate else None
    days = (budget - live) / rate if rate else None
    warning = None
    if f.fs_free_bytes < WAL_ROOM:
        days = 0.0
        warning = (
            f"the store's filesystem has {f.fs_free_bytes} bytes free: the store is full now "
            "(free space on the filesystem, or delete other files there)"
        )
    elif share >= high_water:
        warning = (
            f"store uses {share:.0%} of its budget ({live} of {budget} bytes), above the high-water mark "
            f"{high_water:.0%}; shorten store.retention horizons or raise store.max_size"
        )
    elif fit is not None and keep_days is not None and fit < keep_days:
        warning = (
            f"the budget holds {days_ahead(fit)} of history at the current rate, less than the "
            f"{keep_days:g} {'day' if keep_days == 1 else 'days'} store.retention.payloads keeps"
        )
    return Budget(live, budget, share, f.fs_free_bytes, rate, fit, days, warning)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


async def measure(store: Store, now: datetime, max_bytes: int | None = None) -> SizeFacts:
    """Facts about the store at `now` (an injected clock), read under the writer's lock."""
    async with store._lock:
        return await measure_on(store.db, store.path, now, max_bytes)


async def measure_on(db: aiosqlite.Connection, path: str, now: datetime, max_bytes: int | None) -> SizeFacts:
    """Facts about the store at `path` read through the connection `db`."""
    size = _file_size(path) + _file_size(path + "-wal")
    st = os.statvfs(Path(path).resolve().parent)
    since = format_timestamp(now - RATE_WINDOW)
    row = (
        await _all(
            db,
            "SELECT (SELECT freelist_count FROM pragma_freelist_count)"
            " * (SELECT page_size FROM pragma_page_size),"
            " (SELECT count(*) FROM arrivals) + (SELECT count(*) FROM events)"
            " + (SELECT count(*) FROM event_keys)",
        )
    )[0]
    # arrival ids follow arrival time for live data: count back from the newest one
    recent = await _all(
        db,
        "SELECT count(*) FROM (SELECT arrival_at FROM arrivals ORDER BY arrival_id DESC LIMIT 1000000)"
        " WHERE arrival_at >= ?",
        (since,),
    )
    return SizeFacts(
        store_bytes=size,
        free_pages_bytes=int(row[0]),
        fs_free_bytes=st.f_bavail * st.f_frsize,
        fs_total_bytes=st.f_blocks * st.f_frsize,
        max_bytes=max_bytes,
        rows=int(row[1]),
        arrivals_in_window=int(recent[0][0]),
        window_days=RATE_WINDOW.total_seconds() / 86400,
    )

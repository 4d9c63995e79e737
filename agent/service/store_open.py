"""Opening the service's store: a damaged one moved aside and salvaged, a damaged WAL copied aside.

`open_store` is what `edge-agent run` opens its store with (`agent.service.run`), so a corrupt
file never becomes a crash loop: the damaged store is moved aside (database, WAL and SHM together)
and a new store takes its place holding what could still be read from it (`agent.store.replace`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from agent.config.loader import Config
from agent.core.errors import StoreCorrupt
from agent.core.timestamps import format_timestamp
from agent.service import sdnotify
from agent.store.replace import finish_interrupted, replace_damaged
from agent.store.reserve import Reserve
from agent.store.salvage import SalvageReport
from agent.store.store import Store
from agent.store.wal_check import wal_damage

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


async def open_store(
    path: str, cfg: Config, clock: Clock = utc_now
) -> tuple[Store, str | None, SalvageReport | None]:
    """Open the store; a damaged one is moved aside (database, WAL and SHM together) and a new
    store takes its place holding what could still be read from it (`agent.store.replace`),
    so a corrupt file never becomes a crash loop. Returns (store, alarm, salvage report)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    now = format_timestamp(clock())

    async def open_new(new_path: str) -> Store:
        return await Store.open(new_path, synchronous=cfg.store.synchronous)

    report = await finish_interrupted(path, open_new, now, _salvage_progress)
    alarm = (
        None if report is None else _salvage_alarm("a salvage interrupted by a crash was done again", report)
    )
    wal_alarm = await _check_wal(path, clock)
    alarm = "; ".join(a for a in (alarm, wal_alarm) if a) or None
    try:
        return await _open(path, cfg), alarm, report
    except StoreCorrupt as exc:
        stamp = clock().strftime("%Y%m%dT%H%M%SZ")
        log.error(
            "store was damaged (%s); moving it aside and salvaging what can be read into a new store", exc
        )
        moved, report = await replace_damaged(path, stamp, open_new, now, _salvage_progress)
        alarm = f"store was damaged ({exc}); moved aside to {', '.join(moved)}; a new store was started"
        if report is not None:
            alarm = _salvage_alarm(alarm, report)
        log.error("ALARM %s", alarm)
        return await _open(path, cfg), alarm, report


def _salvage_progress(rows: int) -> None:
    """Tell systemd the start goes on (a large backlog takes a while to salvage: 4,000-7,000
    rows a second measured, `bench/salvage.py`), so `TimeoutStartSec` does not kill it."""
    sdnotify.notify(
        f"EXTEND_TIMEOUT_USEC=60000000\nSTATUS=salvaging a damaged store: {rows} outbox rows taken"
    )


def _salvage_alarm(alarm: str, report: SalvageReport) -> str:
    log.error("ALARM salvage from %s: %s", report.damaged_file, report.summary())
    return f"{alarm}; {report.summary()}"


async def _check_wal(path: str, clock: Clock) -> str | None:
    """An alarm when the WAL holds commits SQLite will drop (`agent.store.wal_check`); the WAL
    is copied aside first, for analysis, since opening the store ends it."""
    wal = f"{path}-wal"
    damage = await asyncio.to_thread(wal_damage, wal)
    if damage is None:
        return None
    copy = f"{path}.wal-damaged-{clock().strftime('%Y%m%dT%H%M%SZ')}"
    try:
        await asyncio.to_thread(shutil.copyfile, wal, copy)
        kept = f"a copy of the WAL is at {copy}"
    except OSError as exc:
        kept = f"the WAL could not be copied aside ({exc})"
    alarm = f"store WAL was damaged: {damage.describe()}; {kept}"
    log.error("ALARM %s", alarm)
    return alarm


async def _open(path: str, cfg: Config) -> Store:
    """The store, its database held to `max_size - reserve` (see `agent.store.reserve`)."""
    quota = Reserve(path, cfg.store.reserve, cfg.store.max_size).database_quota
    return await Store.open(path, synchronous=cfg.store.synchronous, max_bytes=quota)

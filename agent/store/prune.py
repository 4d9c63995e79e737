"""Pruning: the retention rules of `agent.core.retention` applied to a store, in small batches.

Each batch is one short `BEGIN IMMEDIATE ... COMMIT` under the store's lock
over a window of at most `batch_rows` ids, so the recorder waits at most one
batch for the write lock (and an `asyncio.Lock` hands it over in FIFO order).
Stages run oldest first: the arrival log, then canonical payloads (an event
goes only once its arrivals are gone, leaving its compact key record in the
same transaction), then key records past the key horizon (their
(source, bootId) watermark in `forgotten_keys` is raised in the same
transaction). Every window scan starts at the lowest id and stops at the first
window with nothing older than the cutoff: ids follow arrival time for live
data, and an old capture imported late is pruned late, never early.

Space comes back with `PRAGMA incremental_vacuum(N)` (the store is created
with `auto_vacuum=INCREMENTAL`), N pages per step, each step under the lock:
no step needs more free disk than N pages of WAL, unlike a full VACUUM that
needs a second copy of the database. Then `PRAGMA wal_checkpoint(TRUNCATE)`
gives the WAL's own space back, so the WAL never keeps what pruning freed.

A crash at any point loses at most the batch in flight; nothing is pruned
that the rules keep, because each batch re-checks them inside its
transaction (an outbox row may have turned pending again meanwhile).
This is the store's retention executor; the rules themselves are pure and live elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiosqlite

from agent.config.retention import RetentionSettings
from agent.core.duty import rest_after
from agent.core.errors import StoreError
from agent.core.retention import Cutoffs, cutoffs
from agent.store.store import Store
from agent.store.tally import fold_async

log = logging.getLogger(__name__)

# Every upstream that has outbox rows (a loose index scan over outbox(upstream, ...)), plus the
# configured ones: "delivered everywhere" must never miss an upstream that is not configured anymore.
_UPSTREAMS = """
WITH RECURSIVE u(x) AS (
  SELECT min(upstream) FROM outbox
  UNION ALL SELECT (SELECT min(upstream) FROM outbox WHERE upstream > u.x) FROM u WHERE u.x IS NOT NULL)
SELECT x FROM u WHERE x IS NOT NULL UNION SELECT name FROM upstreams
"""


async def _all(db: aiosqlite.Connection, sql: str, params: Any = ()) -> list[Any]:
    return list(await db.execute_fetchall(sql, params))


@dataclass(slots=True)
class PruneTotals:
    """What one pruning run removed. `longest_batch_s` is the longest write-lock hold."""

    arrivals: int = 0
    payloads: int = 0
    outbox_rows: int = 0
    keys_forgotten: int = 0
    pages_freed: int = 0
    batches: int = 0
    longest_batch_s: float = 0.0
    cutoffs: Cutoffs | None = None
    by_stage: dict[str, int] = field(default_factory=dict)


def delivered_sql(ref: str, marks: str) -> str:
    """SQL: the transition `ref` has outbox rows, and every one of them is delivered."""
    return (
        f"EXISTS (SELECT 1 FROM outbox o WHERE o.upstream IN ({marks}) AND o.kind = 'transition'"
        f" AND o.ref_id = {ref})"
        f" AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.upstream IN ({marks}) AND o.kind = 'transition'"
        f" AND o.ref_id = {ref} AND o.state <> 'delivered')"
    )


async def upstream_params(store: Store) -> tuple[str, dict[str, Any]]:
    return await upstream_names(store.db)


async def upstream_names(db: aiosqlite.Connection) -> tuple[str, dict[str, Any]]:
    """Named parameters (`:u0,:u1`, values) for every upstream that has rows or is configured."""
    names = [r[0] for r in await _all(db, _UPSTREAMS)]
    return ",".join(f":u{i}" for i in range(len(names))), {f"u{i}": n for i, n in enumerate(names)}


Step = Callable[[Store, int, int, Cutoffs, PruneTotals], Awaitable[None]]


async def _arrivals_step(store: Store, lo: int, hi: int, cut: Cutoffs, totals: PruneTotals) -> None:
    marks, params = await upstream_params(store)
    gone = await _all(
        store.db,
        "DELETE FROM arrivals AS a WHERE a.arrival_id >= :lo AND a.arrival_id < :hi AND a.arrival_at < :cut"
        " AND a.decision IN ('inserted', 'duplicate')"
        " AND a.arrival_id NOT IN (SELECT arrival_id FROM pending)"
        " AND a.arrival_id NOT IN (SELECT arrival_id FROM boots WHERE arrival_id IS NOT NULL)"
        " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.canonical_id = a.canonical_id"
        f" AND NOT (e.status = 'Canonical' AND {delivered_sql('e.canonical_id', marks)}))"
        " RETURNING canonical_id, decision",
        {"lo": lo, "hi": hi, "cut": cut.arrivals, **params},
    )
    # Each event counts its later arrivals that went (its first is looked up by id): the payload
    # stage reads that count. An event never repeated is not written here.
    by_event = Counter(int(r[0]) for r in gone if r[1] == "duplicate")
    await store.db.executemany(
        "UPDATE events SET pruned_arrivals = pruned_arrivals + ? WHERE canonical_id = ?",
        [(n, cid) for cid, n in sorted(by_event.items())],
    )
    totals.arrivals += len(gone)


async def _payloads_step(store: Store, lo: int, hi: int, cut: Cutoffs, totals: PruneTotals) -> None:
    db = store.db
    marks, params = await upstream_params(store)
    rows = await _all(
        db,
        "SELECT canonical_id, source, transition_id, boot_id, payload_hash, first_arrival, last_arrival"
        " FROM events e WHERE canonical_id >= :lo AND canonical_id < :hi AND last_arrival < :cut"
        f" AND status = 'Canonical' AND {delivered_sql('e.canonical_id', marks)}"
        # none of its arrivals is left: the first is gone, and every later one (folded before)
        " AND pruned_arrivals >= duplicate_count"
        " AND NOT EXISTS (SELECT 1 FROM arrivals a WHERE a.arrival_id = e.first_arrival_id)",
        {"lo": lo, "hi": hi, "cut": cut.payloads, **params},
    )
    if not rows:
        return
    await db.executemany(
        "INSERT INTO event_keys(canonical_id, source, transition_id, boot_id, payload_hash, first_arrival,"
        " last_arrival) VALUES (?,?,?,?,?,?,?)",
        [(r[0], r[1], r[2], r[3], bytes.fromhex(r[4]), r[5], r[6]) for r in rows],
    )
    ids = "[" + ",".join(str(int(r[0])) for r in rows) + "]"
    cur = await db.execute(
        f"DELETE FROM outbox WHERE upstream IN ({marks}) AND kind = 'transition'"
        " AND ref_id IN (SELECT value FROM json_each(:ids))",
        {"ids": ids, **params},
    )
    totals.outbox_rows += max(cur.rowcount, 0)
    await db.execute("DELETE FROM events WHERE canonical_id IN (SELECT value FROM json_each(?))", (ids,))
    totals.payloads += len(rows)


async def _keys_step(store: Store, lo: int, hi: int, cut: Cutoffs, totals: PruneTotals) -> None:
    db = store.db
    rows = await _all(
        db,
        "SELECT canonical_id, source, boot_id, last_arrival FROM event_keys"
        " WHERE canonical_id >= ? AND canonical_id < ? AND last_arrival < ? AND conflict_count = 0",
        (lo, hi, cut.keys),
    )
    if not rows:
        return
    marks: dict[tuple[str, str], tuple[int, str]] = {}
    for _, source, boot, last in rows:
        n, through = marks.get((source, boot), (0, ""))
        marks[(source, boot)] = (n + 1, max(through, last))
    await db.executemany(
        "INSERT INTO forgotten_keys(source, boot_id, keys, through_arrival) VALUES (?,?,?,?)"
        " ON CONFLICT(source, boot_id) DO UPDATE SET keys = keys + excluded.keys,"
        " through_arrival = max(through_arrival, excluded.through_arrival)",
        [(s, b, n, t) for (s, b), (n, t) in marks.items()],
    )
    ids = "[" + ",".join(str(int(r[0])) for r in rows) + "]"
    await db.execute("DELETE FROM event_keys WHERE canonical_id IN (SELECT value FROM json_each(?))", (ids,))
    totals.keys_forgotten += len(rows)


# progress(stage, ids done, ids in the table's range): how far a stage has come, for a progress bar
Progress = Callable[[str, int, int], None]

# (stage, table, id column, time column, cutoff field, step)
_STAGES: list[tuple[str, str, str, str, str, Step]] = [
    ("arrivals", "arrivals", "arrival_id", "arrival_at", "arrivals", _arrivals_step),
    ("payloads", "events", "canonical_id", "last_arrival", "payloads", _payloads_step),
    ("keys", "event_keys", "canonical_id", "last_arrival", "keys", _keys_step),
]


async def _stage(
    store: Store,
    stage: tuple[str, str, str, str, str, Step],
    cut: Cutoffs,
    settings: RetentionSettings,
    totals: PruneTotals,
    progress: Progress | None = None,
) -> None:
    name, table, col, tcol, cut_name, step = stage
    cutoff = getattr(cut, cut_name)
    batch_rows = settings.batch_rows
    async with store._lock:
        lo, top = (await _all(store.db, f"SELECT min({col}), max({col}) FROM {table}"))[0]
    first = lo
    while lo is not None:
        if progress is not None:
            progress(name, int(lo) - int(first), int(top) - int(first) + 1)
        hi = int(lo) + batch_rows
        async with store._lock:
            t0 = time.perf_counter()
            async with store._transaction():
                # The events' counts whole before a rule reads them (agent.store.tally).
                await fold_async(store.db)
                probe = await _all(
                    store.db,
                    f"SELECT EXISTS(SELECT 1 FROM {table} WHERE {col} >= ? AND {col} < ? AND {tcol} < ?),"
                    f" (SELECT min({col}) FROM {table} WHERE {col} >= ?)",
                    (lo, hi, cutoff, hi),
                )
                old, lo = probe[0]
                if old:
                    await step(store, hi - batch_rows, hi, cut, totals)
                    await _count(store, name, totals)
            took = time.perf_counter() - t0
            totals.batches += 1
            totals.longest_batch_s = max(totals.longest_batch_s, took)
        # Hold the lock at most `duty` of the time; even at 1.0 a waiting recorder goes first.
        await asyncio.sleep(rest_after(took, settings.duty))
        if not old:
            break


async def _count(store: Store, stage: str, totals: PruneTotals) -> None:
    """Keep cumulative counters in the store (the report's counts shrink as rows go)."""
    now = {"arrivals": totals.arrivals, "payloads": totals.payloads, "keys": totals.keys_forgotten}
    now["outbox_rows"] = totals.outbox_rows
    delta = [(f"pruned_{k}", v - totals.by_stage.get(k, 0)) for k, v in now.items()]
    delta = [(k, v) for k, v in delta if v]
    if delta:
        await store.db.executemany(
            "INSERT INTO retention_counts(name, value) VALUES (?, ?)"
            " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            delta,
        )
    totals.by_stage.update(now)


async def reclaim(store: Store, pages_per_step: int) -> int:
    """Give free pages back to the filesystem, `pages_per_step` at a time. Returns pages freed."""
    freed = 0
    while True:
        async with store._lock:
            free = int((await _all(store.db, "PRAGMA freelist_count"))[0][0])
            auto = int((await _all(store.db, "PRAGMA auto_vacuum"))[0][0])
            if free == 0 or auto != 2:  # 2 = INCREMENTAL; a store made before it just reuses free pages
                break
            async with store._transaction():
                await _all(store.db, f"PRAGMA incremental_vacuum({int(pages_per_step)})")
            after = int((await _all(store.db, "PRAGMA freelist_count"))[0][0])
        freed += free - after
        await asyncio.sleep(0)
        if after >= free:
            break
    if freed:
        # TRUNCATE, not PASSIVE: the pages just given back must not stay taken by a WAL that grew
        # while pruning (a full disk would see no room come back). It waits for readers for at
        # most the busy timeout; a reader that holds on leaves the WAL as it is until next time.
        async with store._lock:
            await _all(store.db, "PRAGMA wal_checkpoint(TRUNCATE)")
    return freed


async def prune(
    store: Store, settings: RetentionSettings, now: datetime, progress: Progress | None = None
) -> PruneTotals:
    """Prune everything past its horizon at `now` (injected), in batches; then reclaim space.
    `progress(stage, done, total)` is told before each batch how far through its table a stage is."""
    cut = cutoffs(settings, now)
    totals = PruneTotals(cutoffs=cut)
    for stage in _STAGES:
        await _stage(store, stage, cut, settings, totals, progress)
    totals.pages_freed = await reclaim(store, settings.vacuum_pages)
    log.info(
        "pruned arrivals=%d payloads=%d outbox_rows=%d keys_forgotten=%d pages_freed=%d batches=%d"
        " longest_batch_ms=%.1f",
        totals.arrivals, totals.payloads, totals.outbox_rows, totals.keys_forgotten, totals.pages_freed,
        totals.batches, totals.longest_batch_s * 1000,
    )  # fmt: skip
    return totals


async def run_retention(
    store: Store,
    settings: RetentionSettings,
    clock: Callable[[], datetime],
    stop: asyncio.Event,
    on_result: Callable[[PruneTotals], None] | None = None,
) -> None:
    """Background task: prune every `settings.interval` until `stop` is set.

    Stopped by the event, never by cancellation in the middle of a batch
    (a cancelled batch is rolled back, which is safe but wasted work).
    """
    while not stop.is_set():
        try:
            totals = await prune(store, settings, clock())
        except StoreError as exc:  # e.g. a full disk: pruning waits for the next round, the service goes on
            log.warning("retention round failed, retrying next interval: %s", exc)
        else:
            if on_result is not None:
                on_result(totals)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.interval.total_seconds())

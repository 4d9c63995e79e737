"""`edge-agent ledger prune [--dry-run]`, and `ledger run` every `retention.every`: archive, then drop.

For each step of `prune_sql.STEPS` (reviewed conflicts and pending arrivals, sent notifications,
arrivals, canonical payloads, identities beyond the horizon), in that order:

0. for `notification` and `arrival`, every time partition wholly before the cutoff is archived
   (a file per partition) and truncated, and dropped when nothing in it is kept
   (`agent.ledger.prune_partitions`); their row steps below take only the rows of the DEFAULT and
   legacy partitions (a period partition's rows go with it, never row by row);
1. the candidates (older than the step's period, named by nothing kept) are streamed from one
   statement into the archive (`agent.ledger.archive`: a file per day, fsynced, renamed, read
   back and verified); at most `batch * 100` rows per step and run (the next run goes on);
2. only then they are deleted (payloads: cleared) in transactions of `batch` ids each, every
   delete checking again that its rows still qualify;
3. the step's counts and files are recorded in `retention_table_run`.

An archive that cannot be written or does not verify stops the prune before its delete
(`ArchiveError`, the run recorded `archive_failed` with the reason). One prune at a time per
database (a session advisory lock; a second one is told and does nothing). `--dry-run` writes
and deletes nothing: per step, how many rows would go, the oldest, and the setting.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from agent.ledger import prune_partitions, prune_sql
from agent.ledger.archive import ArchiveError, DayWriter
from agent.ledger.errors import LedgerError
from agent.ledger.prune_pace import Pace
from agent.ledger.prune_partitions import PartitionResult
from agent.ledger.retention_config import RetentionSettings

log = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

LOCK_ID = 0x6C6564707275  # "ledpru": one prune at a time per database
RUNS_PER_STEP = 100  # a step takes at most batch * RUNS_PER_STEP rows per run


class PruneBusy(LedgerError):
    """Another prune holds the lock: this one did nothing."""


@dataclass(slots=True)
class StepResult:
    table: str
    setting: str
    cutoff: datetime
    why: str
    archived: int = 0
    pruned: int = 0
    oldest: datetime | None = None  # --dry-run: the oldest row that would go
    files: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PruneResult:
    run_id: int | None  # None: a dry run
    steps: list[StepResult]
    partitions: list[PartitionResult] = field(default_factory=list)  # taken whole (or would be)


def cutoff_of(step: prune_sql.Step, settings: RetentionSettings, now: datetime) -> datetime:
    return now - timedelta(seconds=float(getattr(settings, f"{step.setting}_s")))


async def prune(
    conn: Conn, settings: RetentionSettings, *, now: datetime | None = None, dry_run: bool = False
) -> PruneResult:
    """One prune (or its dry run). Raises ArchiveError (nothing of that step deleted), PruneBusy."""
    now = now or datetime.now(UTC)
    await conn.rollback()
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_ID,))
    got = await cur.fetchone()
    await conn.commit()
    if not got or not got[0]:
        raise PruneBusy("another prune of this ledger is running: this one did nothing")
    try:
        if dry_run:
            return await _dry_run(conn, settings, now)
        return await _run(conn, settings, now)
    finally:
        await conn.rollback()
        await conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_ID,))
        await conn.commit()


async def _run(conn: Conn, settings: RetentionSettings, now: datetime) -> PruneResult:
    cur = await conn.execute(
        "INSERT INTO retention_run (settings) VALUES (%s::jsonb) RETURNING id",
        (json.dumps(settings.as_json()),),
    )
    row = await cur.fetchone()
    assert row is not None
    run_id = int(row[0])
    await conn.commit()
    log.info("ledger prune run=%d started archive_dir=%s", run_id, settings.archive_dir)
    results: list[StepResult] = []
    parts: list[PartitionResult] = []
    pace = Pace(settings.duty)
    try:
        for step in prune_sql.STEPS:
            spec = prune_partitions.SPECS.get(step.table)
            if spec is not None:  # whole partitions first, then the rows left (bounded DELETEs)
                cutoff = cutoff_of(step, settings, now)
                parts += await prune_partitions.prune_table(conn, run_id, spec, settings, cutoff, pace)
            res = await _step(conn, run_id, step, settings, now, pace)
            results.append(res)
            log.info(
                "ledger prune run=%d table=%s archived=%d pruned=%d older_than=%s (%s)",
                run_id,
                res.table,
                res.archived,
                res.pruned,
                res.cutoff.isoformat(),
                res.setting,
            )
    except BaseException as exc:
        await conn.rollback()
        outcome = "archive_failed" if isinstance(exc, ArchiveError | OSError) else "failed"
        await _finish(conn, run_id, outcome, str(exc) or type(exc).__name__)
        log.error("ledger prune run=%d stopped, nothing more deleted: %s: %s", run_id, outcome, exc)
        if isinstance(exc, OSError):
            raise ArchiveError(f"the archive could not be written: {exc}") from exc
        raise
    await _finish(conn, run_id, "done", None)
    log.info("ledger prune run=%d done, rested %.1f s (duty %g)", run_id, pace.rested_s, settings.duty)
    return PruneResult(run_id, results, parts)


async def _finish(conn: Conn, run_id: int, outcome: str, error: str | None) -> None:
    await conn.execute(
        "UPDATE retention_run SET finished_at = now(), outcome = %s, error = %s WHERE id = %s",
        (outcome, error, run_id),
    )
    await conn.commit()


async def _step(
    conn: Conn, run_id: int, step: prune_sql.Step, settings: RetentionSettings, now: datetime, pace: Pace
) -> StepResult:
    cutoff = cutoff_of(step, settings, now)
    res = StepResult(step.table, step.setting, cutoff, step.why)
    params = await _params(conn, step, cutoff)
    writer = DayWriter(Path(settings.archive_dir), step.table, run_id, step.id_field, step.why)
    ids: list[int] = []
    select = await prune_partitions.row_select(conn, step.table, step.select)
    sql = "SELECT * FROM (" + select + ") s ORDER BY 1, 2 LIMIT %(limit)s"
    try:
        async with conn.cursor(name=f"prune_{step.table}") as cur:
            cur.itersize = 2000
            await cur.execute(sql.encode(), {**params, "limit": settings.batch * RUNS_PER_STEP})
            async for day, row_id, at, line in cur:
                writer.add(str(day), int(row_id), None if at is None else at.isoformat(), str(line))
                ids.append(int(row_id))
                await pace.step()
        files = writer.finish()
    except BaseException:
        writer.abandon()
        raise
    await conn.rollback()
    res.archived, res.files = writer.rows, [str(f) for f in files]
    for start in range(0, len(ids), settings.batch):
        async with conn.transaction():
            cur2 = await conn.execute(
                step.act.encode(), {**params, "ids": ids[start : start + settings.batch]}
            )
            got = await cur2.fetchone()
            res.pruned += int(got[0]) if got else 0
        await pace.step()
    await conn.execute(
        "INSERT INTO retention_table_run (run_id, tbl, archived, pruned, files) VALUES (%s, %s, %s, %s, %s)",
        (run_id, step.table, res.archived, res.pruned, res.files),
    )
    await conn.commit()
    return res


async def _params(conn: Conn, step: prune_sql.Step, cutoff: datetime) -> dict[str, Any]:
    """The step's parameters: the cutoff, and its id bound (read once, not in every statement)."""
    params: dict[str, Any] = {"cutoff": cutoff}
    if step.bound is not None:
        cur = await conn.execute(step.bound, params)
        row = await cur.fetchone()
        params["bound"] = int(row[0]) if row else 9223372036854775807
    return params


async def _dry_run(conn: Conn, settings: RetentionSettings, now: datetime) -> PruneResult:
    """Per step what would go row by row; and the time partitions that would be taken whole."""
    parts: list[PartitionResult] = []
    for step in prune_sql.STEPS:
        spec = prune_partitions.SPECS.get(step.table)
        if spec is not None:
            parts += await prune_partitions.dry_run(conn, spec, cutoff_of(step, settings, now))
    return PruneResult(None, [await _dry_step(conn, s, settings, now) for s in prune_sql.STEPS], parts)


async def _dry_step(
    conn: Conn, step: prune_sql.Step, settings: RetentionSettings, now: datetime
) -> StepResult:
    cutoff = cutoff_of(step, settings, now)
    res = StepResult(step.table, step.setting, cutoff, step.why)
    select = await prune_partitions.row_select(conn, step.table, step.select)
    sql = "SELECT count(*), min(s.at) FROM (" + select + ") AS s(day, id, at, line)"
    cur = await conn.execute(sql.encode(), await _params(conn, step, cutoff))
    row = await cur.fetchone()
    await conn.rollback()
    if row is not None:
        res.archived, res.oldest = int(row[0]), row[1]
    return res

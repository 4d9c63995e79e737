"""The prune by time partition (docs/retention.md): a partition of `arrival` or `notification`
whose whole range lies before its table's retention cutoff goes at once, not row by row.

Per such partition, oldest first, in one transaction:

1. `LOCK ... IN SHARE MODE` (no row can be written to it; readers go on), then every row it gives
   up (not named by anything kept: `prune_sql.KEPT_ARRIVAL`; for notifications, sent before the
   cutoff) is streamed into one archive file of its own with its manifest, fsynced and verified
   (`agent.ledger.archive`);
2. only then `ACCESS EXCLUSIVE` (`lock_timeout` bounds the wait), the rows it keeps are set aside,
   the partition is `TRUNCATE`d and they are written back: the partition's storage goes at once,
   the kept rows stay where they were (a kept reason only grows while the lock is held, so every
   row that leaves is in the file);
3. a partition left empty is then `DROP`ped (its own short transaction; when its table is busy it
   is dropped by a later run). A partition whose lock is not had within `lock_timeout` is not
   truncated (its archive file removed again): its old rows go by the row step that follows.

An archive that cannot be written or does not verify raises `ArchiveError` before the truncate:
the transaction rolls back, the partition keeps every row. A period partition's rows go only
with it (never row by row): a row stays at least its period, at most its period plus the
partition's length. The row steps (`prune_sql.STEPS`, bounded DELETEs, run after this) read
only the DEFAULT partition and the legacy one of a migrated ledger (`row_select`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from agent.ledger import prune_sql, time_partitions
from agent.ledger.archive import DayWriter
from agent.ledger.errors import LedgerError
from agent.ledger.prune_pace import Pace
from agent.ledger.retention_config import RetentionSettings
from agent.ledger.time_partitions import Partition

log = logging.getLogger(__name__)

_NAME = re.compile(r"[a-z][a-z0-9_]*")  # the partitions' names (made by the ledger or migration 0007)

Conn = psycopg.AsyncConnection[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Spec:
    table: str
    setting: str  # the `retention:` key whose period it keeps
    alias: LiteralString  # the table's alias in `kept`
    kept: LiteralString  # the rows a partition past the cutoff keeps; %(cutoff)s
    why: str


SPECS = {
    "notification": Spec(
        "notification",
        "notifications",
        "n",
        "(n.state <> 'sent' OR n.sent_at >= %(cutoff)s)",
        "a notification partition created wholly before this: its sent notifications go"
        " (pending and dead ones stay in it)",
    ),
    "arrival": Spec(
        "arrival",
        "arrivals",
        "a",
        prune_sql.KEPT_ARRIVAL,
        "an arrival partition received wholly before this: its arrivals go, not those named by a kept"
        " conflict, pending arrival, review mark, boot or anomaly (they stay in it)",
    ),
}


@dataclass(slots=True)
class PartitionResult:
    table: str
    partition: str
    lower: datetime | None  # None: the legacy partition's MINVALUE
    upper: datetime | None
    setting: str
    cutoff: datetime
    why: str
    rows: int = 0  # in the partition
    kept: int = 0  # stay in it
    archived: int = 0
    pruned: int = 0
    dropped: bool = False  # --dry-run: would be
    files: list[str] = field(default_factory=list)


async def row_relations(conn: Conn, table: str) -> list[str] | None:
    """Where a table's rows go row by row: None for the whole table (not partitioned by time), else
    its DEFAULT partition and the legacy one of a migrated ledger (`FROM (MINVALUE)`). A row of a
    period partition goes with its partition, never row by row."""
    if table not in SPECS or not await time_partitions.time_partitioned(conn, table):
        return None
    rels = [p.name for p in await time_partitions.partitions(conn, table) if p.default or p.lower is None]
    await conn.rollback()
    for rel in rels:
        if not _NAME.fullmatch(rel):
            raise LedgerError(f"unexpected partition name {rel!r}")
    return rels


def on(select: str, table: str, rel: str) -> str:
    """`select` reading the partition `rel` where it read `table` (`FROM <table> `)."""
    return select.replace(f"FROM {table} ", f'FROM "{rel}" ')


async def row_select(conn: Conn, table: str, select: str) -> str:
    """A row step's candidates (`prune_sql.STEPS`) from where the table's rows go row by row."""
    rels = await row_relations(conn, table)
    if rels is None:
        return select
    if not rels:
        return "SELECT NULL::text, NULL::bigint, NULL::timestamptz, NULL::text WHERE false"
    return " UNION ALL ".join("(" + on(select, table, rel) + ")" for rel in rels)


async def oldest_due(conn: Conn, table: str) -> datetime | None:
    """Where the oldest period partition holding a row a prune would take ends (its rows go when
    that end is past the period, so they count from it), or None."""
    spec = SPECS[table]
    for part in await time_partitions.partitions(conn, table):
        if part.default or part.lower is None or part.upper is None:
            continue
        cur = await conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} {} WHERE NOT {})").format(
                sql.Identifier(part.name), sql.SQL(spec.alias), sql.SQL(spec.kept)
            ),
            {"cutoff": "infinity"},
        )
        row = await cur.fetchone()
        if row and row[0]:
            await conn.rollback()
            return part.upper
    await conn.rollback()
    return None


async def expired(conn: Conn, table: str, cutoff: datetime) -> list[Partition]:
    """The table's time partitions whose whole range is before `cutoff`, oldest first."""
    if not await time_partitions.time_partitioned(conn, table):
        return []
    parts = await time_partitions.partitions(conn, table)
    await conn.rollback()
    return [p for p in parts if not p.default and p.upper is not None and p.upper <= cutoff]


def _result(spec: Spec, part: Partition, cutoff: datetime) -> PartitionResult:
    return PartitionResult(spec.table, part.name, part.lower, part.upper, spec.setting, cutoff, spec.why)


def _counts(spec: Spec, part: Partition) -> sql.Composed:
    return sql.SQL("SELECT count(*), count(*) FILTER (WHERE {}) FROM {} {}").format(
        sql.SQL(spec.kept), sql.Identifier(part.name), sql.SQL(spec.alias)
    )


async def dry_run(conn: Conn, spec: Spec, cutoff: datetime) -> list[PartitionResult]:
    """What `prune_table` would do: per partition its rows, those it keeps, whether it is dropped."""
    out: list[PartitionResult] = []
    for part in await expired(conn, spec.table, cutoff):
        res = _result(spec, part, cutoff)
        cur = await conn.execute(_counts(spec, part), {"cutoff": cutoff})
        row = await cur.fetchone()
        await conn.rollback()
        if row is not None:
            res.rows, res.kept = int(row[0]), int(row[1])
        res.archived = res.rows - res.kept
        res.dropped = res.kept == 0
        out.append(res)
    return out


async def prune_table(
    conn: Conn,
    run_id: int,
    spec: Spec,
    settings: RetentionSettings,
    cutoff: datetime,
    pace: Pace | None = None,
) -> list[PartitionResult]:
    """Archive, then truncate (and drop) every partition of the table past the cutoff; recorded in
    `retention_table_run` as `<table>_partitions`. Raises ArchiveError (that partition untouched)."""
    out: list[PartitionResult] = []
    pace = pace or Pace(settings.duty)
    for part in await expired(conn, spec.table, cutoff):
        try:
            res = await _one(conn, run_id, spec, part, settings, cutoff, pace)
        except psycopg.errors.LockNotAvailable as exc:
            await conn.rollback()
            log.warning(
                "ledger prune run=%d partition=%s not truncated (busy), its rows go by the row step: %s",
                run_id,
                part.name,
                exc,
            )
            continue
        log.info(
            "ledger prune run=%d partition=%s rows=%d archived=%d pruned=%d kept=%d dropped=%s",
            run_id,
            res.partition,
            res.rows,
            res.archived,
            res.pruned,
            res.kept,
            res.dropped,
        )
        out.append(res)
    await conn.execute(
        "INSERT INTO retention_table_run (run_id, tbl, archived, pruned, files) VALUES (%s, %s, %s, %s, %s)",
        (
            run_id,
            f"{spec.table}_partitions",
            sum(r.archived for r in out),
            sum(r.pruned for r in out),
            [f for r in out for f in r.files],
        ),
    )
    await conn.commit()
    return out


async def _one(
    conn: Conn,
    run_id: int,
    spec: Spec,
    part: Partition,
    settings: RetentionSettings,
    cutoff: datetime,
    pace: Pace,
) -> PartitionResult:
    res = _result(spec, part, cutoff)
    name, params = sql.Identifier(part.name), {"cutoff": cutoff}
    alias, kept = sql.SQL(spec.alias), sql.SQL(spec.kept)
    writer = DayWriter(Path(settings.archive_dir), spec.table, run_id, "id", spec.why, unit="partition")
    col = sql.Identifier(spec.alias, time_partitions.COLUMN[spec.table])
    await conn.rollback()
    try:
        async with conn.transaction():
            await conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(time_partitions.LOCK_TIMEOUT))
            )
            await conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(name))
            async with conn.cursor(name=f"prune_{part.name}") as cur:
                cur.itersize = 2000
                await cur.execute(
                    sql.SQL("SELECT {}.id, {}, to_jsonb({})::text FROM {} {} WHERE NOT {} ORDER BY 1").format(
                        alias, col, alias, name, alias, kept
                    ),
                    params,
                )
                async for row_id, at, line in cur:
                    writer.add(part.name, int(row_id), at.isoformat(), str(line))
                    await pace.step()  # rests inside the SHARE lock: only writes to this old partition wait
            res.files = [str(f) for f in writer.finish()]  # verified, or ArchiveError
            await pace.step()
            res.archived = writer.rows
            await _truncate(conn, spec, part, res, params)
    except psycopg.errors.LockNotAvailable:
        writer.discard()  # nothing pruned: its file goes, the next run writes it again
        raise
    except BaseException:
        writer.abandon()
        raise
    if res.kept == 0:
        await _drop(conn, part, res)
    return res


async def _truncate(
    conn: Conn, spec: Spec, part: Partition, res: PartitionResult, params: dict[str, Any]
) -> None:
    """Inside the archive's transaction: the kept rows set aside, the partition truncated, the kept
    rows back. Nothing archived: the partition is left as it is."""
    name = sql.Identifier(part.name)
    cur = await conn.execute(_counts(spec, part), params)
    row = await cur.fetchone()
    assert row is not None
    res.rows, res.kept = int(row[0]), int(row[1])
    if res.rows - res.kept > res.archived:
        raise LedgerError(
            f"{part.name}: {res.rows - res.kept} rows to prune, {res.archived} archived: nothing pruned"
        )
    if res.archived == 0:
        return
    await conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(name))
    cols = await time_partitions.columns(conn, spec.table)
    await conn.execute(
        sql.SQL("CREATE TEMP TABLE prune_keep ON COMMIT DROP AS SELECT {} FROM {} {} WHERE {}").format(
            cols, name, sql.SQL(spec.alias), sql.SQL(spec.kept)
        ),
        params,
    )
    cur = await conn.execute("SELECT count(*) FROM prune_keep")  # a kept reason only grows
    row = await cur.fetchone()
    res.kept = int(row[0]) if row else res.kept
    await conn.execute(sql.SQL("TRUNCATE {}").format(name))
    if res.kept:
        await conn.execute(
            sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM prune_keep").format(
                sql.Identifier(spec.table), cols, cols
            )
        )
    res.pruned = res.rows - res.kept


async def _drop(conn: Conn, part: Partition, res: PartitionResult) -> None:
    """An empty partition past its cutoff is dropped; a busy table leaves it to a later run."""
    try:
        async with conn.transaction():
            await conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(time_partitions.LOCK_TIMEOUT))
            )
            cur = await conn.execute(
                sql.SQL("SELECT NOT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(part.name))
            )
            row = await cur.fetchone()
            if row and row[0]:
                await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(part.name)))
                res.dropped = True
    except psycopg.errors.LockNotAvailable as exc:
        log.warning("partition %s emptied, not dropped now (its table is busy): %s", part.name, exc)

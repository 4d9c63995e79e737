"""Time partitions of `arrival` (by `received_at`) and `notification` (by `created_at`): the ledger
makes them itself, ahead of time (migration 0007 made the tables `PARTITION BY RANGE`).

`ensure` makes the partitions of the current period and the next `ahead` ones (`month` or `day`,
in UTC; `retention.partition`, `retention.partitions_ahead`) where no partition covers them yet: at
the start of `ledger run`, of `ledger import` and `ledger migrate`, and at every turn of the prune
schedule. A period partly covered (the legacy partition of a migrated ledger, a change from month
to day) gets partitions for its uncovered parts only. Rows the DEFAULT partition holds for a new
partition's range (written while it did not exist) are moved into it in the same transaction.

On the partitioned_by_source layout (canonical_event hash-partitioned by source) every time
partition is itself `PARTITION BY HASH (source)` with as many sub-partitions as canonical_event
has: range by time first (a prune drops a period whole), then hash by source. Every leaf of
`arrival` gets its unique index on (source, arrival_key) (migration 0007 says why).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

COLUMN = {"arrival": "received_at", "notification": "created_at"}
PERIODS = ("month", "day")
DEFAULT_PERIOD = "month"
DEFAULT_AHEAD = 2
LOCK_ID = 0x6C6564706172  # "ledpar": one maker of partitions at a time per database
LOCK_TIMEOUT = "2s"  # a waiting ACCESS EXCLUSIVE request queues intake behind it: never long

# Each partition of a table with its bounds (NULL: MINVALUE / MAXVALUE) and whether it is DEFAULT.
PARTITIONS = r"""
SELECT c.relname, b.expr = 'DEFAULT',
       substring(b.expr FROM 'FROM \(''([^'']*)''\)')::timestamptz,
       substring(b.expr FROM 'TO \(''([^'']*)''\)')::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
     LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) b
WHERE i.inhparent = to_regclass(%s)
ORDER BY 3 NULLS FIRST
"""


@dataclass(frozen=True, slots=True)
class Partition:
    table: str
    name: str
    lower: datetime | None  # None: MINVALUE (the legacy partition)
    upper: datetime | None  # None: MAXVALUE
    default: bool = False


async def time_partitioned(conn: Conn, table: str) -> bool:
    cur = await conn.execute(
        "SELECT partstrat = 'r' FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", (table,)
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def partitions(conn: Conn, table: str) -> list[Partition]:
    """The table's partitions, oldest first (the DEFAULT one among them)."""
    cur = await conn.execute(PARTITIONS, (table,))
    return [Partition(table, str(n), lo, hi, bool(d)) for n, d, lo, hi in await cur.fetchall()]


async def hash_modulus(conn: Conn) -> int:
    """The partitioned_by_source layout's hash partitions (canonical_event's); 0 on the plain one."""
    cur = await conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'canonical_event'::regclass")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


def period_start(at: datetime, period: str) -> datetime:
    at = at.astimezone(UTC)
    if period == "day":
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_start(start: datetime, period: str) -> datetime:
    if period == "day":
        return start + timedelta(days=1)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def wanted(now: datetime, period: str, ahead: int) -> list[tuple[datetime, datetime]]:
    """The current period and the next `ahead` ones."""
    out: list[tuple[datetime, datetime]] = []
    start = period_start(now, period)
    for _ in range(ahead + 1):
        end = next_start(start, period)
        out.append((start, end))
        start = end
    return out


def uncovered(span: tuple[datetime, datetime], have: list[Partition]) -> list[tuple[datetime, datetime]]:
    """The parts of `span` no (range) partition covers."""
    gaps = [span]
    for p in have:
        if p.default:
            continue
        lo = p.lower or datetime.min.replace(tzinfo=UTC)
        hi = p.upper or datetime.max.replace(tzinfo=UTC)
        nxt: list[tuple[datetime, datetime]] = []
        for a, b in gaps:
            if hi <= a or lo >= b:
                nxt.append((a, b))
                continue
            if a < lo:
                nxt.append((a, lo))
            if hi < b:
                nxt.append((hi, b))
        gaps = nxt
    return gaps


def name_of(table: str, lo: datetime) -> str:
    lo = lo.astimezone(UTC)
    if lo.time() == datetime.min.time():
        return f"{table}_{lo:%Y%m%d}"
    return f"{table}_{lo:%Y%m%d_%H%M%S}"


async def period_in_use(conn: Conn) -> str:
    """The period of the newest time partition of `arrival` (a day or shorter: `day`), else the
    default: what `ledger migrate` and `ledger import` (no `retention:` read) keep making."""
    spans = [p.upper - p.lower for p in await partitions(conn, "arrival") if p.lower and p.upper]
    await conn.rollback()
    return "day" if spans and spans[-1] <= timedelta(days=1) else DEFAULT_PERIOD


async def ensure(
    conn: Conn, period: str | None = DEFAULT_PERIOD, ahead: int = DEFAULT_AHEAD, now: datetime | None = None
) -> list[str]:
    """Make what is missing of the current and the next `ahead` periods; returns the names made.
    `period` None: the period in use (`period_in_use`). A period that cannot be made now (its table
    busy past LOCK_TIMEOUT) is logged and left for the next call: until then its rows go to the
    DEFAULT partition, nothing is refused."""
    await conn.rollback()
    period = period or await period_in_use(conn)
    if period not in PERIODS:
        raise ValueError(f"partition period must be one of {PERIODS}, not {period!r}")
    now = now or datetime.now(UTC)
    made: list[str] = []
    modulus = await hash_modulus(conn)
    for table in COLUMN:
        if not await time_partitioned(conn, table):
            continue
        for span in wanted(now, period, ahead):
            gaps = uncovered(span, await partitions(conn, table))
            await conn.rollback()  # reads only: each partition is made in a transaction of its own
            for lo, hi in gaps:
                try:
                    made.append(await create(conn, table, lo, hi, modulus))
                except psycopg.errors.LockNotAvailable as exc:
                    log.warning("partition of %s from %s not made now (table busy): %s", table, lo, exc)
                except (psycopg.errors.DuplicateTable, psycopg.errors.InvalidObjectDefinition) as exc:
                    log.info("partition of %s from %s made by another ledger meanwhile: %s", table, lo, exc)
    await conn.rollback()
    if made:
        log.info("ledger time partitions made: %s", ", ".join(made))
    return made


async def create(conn: Conn, table: str, lo: datetime, hi: datetime, modulus: int) -> str:
    """One time partition [lo, hi) of `table` (with its hash sub-partitions on that layout), the
    rows the DEFAULT partition holds for it moved in; one transaction."""
    name = name_of(table, lo)
    col = sql.Identifier(COLUMN[table])
    t, dflt = sql.Identifier(table), sql.Identifier(f"{table}_default")
    in_range = sql.SQL("{} >= {} AND {} < {}").format(col, sql.Literal(lo), col, sql.Literal(hi))
    async with conn.transaction():
        await conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
        await conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(t))
        cur = await conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(dflt, in_range))
        row = await cur.fetchone()
        moving = bool(row and row[0])
        if moving:
            await conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE partition_moving ON COMMIT DROP AS SELECT * FROM {} WHERE {}"
                ).format(dflt, in_range)
            )
            await conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(dflt, in_range))
        await _make(conn, table, name, lo, hi, modulus)
        if moving:
            cols = await columns(conn, table)
            await conn.execute(
                sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM partition_moving").format(
                    t, cols, cols
                )
            )
    return name


async def _make(conn: Conn, table: str, name: str, lo: datetime, hi: datetime, modulus: int) -> None:
    part = sql.Identifier(name)
    by_source = sql.SQL(" PARTITION BY HASH (source)") if modulus else sql.SQL("")
    await conn.execute(
        sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({}){}").format(
            part, sql.Identifier(table), sql.Literal(lo), sql.Literal(hi), by_source
        )
    )
    leaves = [f"{name}_h{i}" for i in range(modulus)] if modulus else [name]
    for i, leaf in enumerate(leaves if modulus else []):
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})").format(
                sql.Identifier(leaf), part, sql.Literal(modulus), sql.Literal(i)
            )
        )
    for leaf in leaves if table == "arrival" else []:
        await conn.execute(
            sql.SQL("CREATE UNIQUE INDEX {} ON {} (source, arrival_key) NULLS NOT DISTINCT").format(
                sql.Identifier(f"{leaf}_arrival_key"), sql.Identifier(leaf)
            )
        )


async def columns(conn: Conn, table: str) -> sql.Composed:
    """The table's columns in order, as a list for INSERT ... SELECT (by name, never by position)."""
    cur = await conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum",
        (table,),
    )
    return sql.SQL(", ").join(sql.Identifier(str(r[0])) for r in await cur.fetchall())


async def oldest(conn: Conn) -> dict[str, Partition | None]:
    """The oldest time partition of each time-partitioned table (the DEFAULT one aside)."""
    out: dict[str, Partition | None] = {}
    for table in COLUMN:
        parts = [p for p in await partitions(conn, table) if not p.default]
        out[table] = parts[0] if parts else None
    await conn.rollback()
    return out

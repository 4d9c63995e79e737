"""What retention did and what is kept: read for `ledger check`, `/metrics` and the overview page.

The last prune (its settings, outcome, per table the rows archived and pruned), the oldest row
kept per table, the oldest time partition of arrival and notification (a catalog read), the
identities kept (and of them those whose payload is pruned), the
`beyond_horizon` arrivals, and each table's size on disk (`pg_total_relation_size`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from agent.ledger import prune_partitions, prune_sql, time_partitions

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

# The oldest row a prune could take per table (named by nothing kept: an open conflict's or a
# boot's arrival is old by design and is not "behind"), by the time its period is counted from.
# Arrivals and canonical rows are read in id order (ids follow time closely): no index on their
# time is written per row for this; the rows kept on purpose at the front are read each time.
OLDEST: dict[str, str] = {
    "arrival": "SELECT a.received_at FROM arrival a WHERE NOT "
    + prune_sql.KEPT_ARRIVAL
    + " ORDER BY a.id LIMIT 1",
    "notification": "SELECT min(sent_at) FROM notification WHERE state = 'sent'",
    "canonical_payload": "SELECT e.created_at FROM canonical_event e WHERE e.payload IS NOT NULL AND NOT "
    + prune_sql.CANONICAL_NAMED
    + " ORDER BY e.id LIMIT 1",
    "canonical_identity": "SELECT least((SELECT min(source_ts) FROM canonical_event),"
    " (SELECT min(inserted_arrival_at) FROM canonical_event WHERE source_ts IS NULL))",
}
# The table of `OLDEST` -> the `retention:` setting that keeps it.
SETTING_OF = {
    "arrival": "arrivals",
    "notification": "notifications",
    "canonical_payload": "canonical_payloads",
    "canonical_identity": "identity_horizon",
}
SIZED = (
    "arrival",
    "canonical_event",
    "notification",
    "conflict",
    "pending",
    "review_mark",
    "boot",
    "anomaly",
)

LAST_RUN = (
    "SELECT id, started_at, finished_at, outcome, error, settings FROM retention_run"
    " WHERE NOT dry_run ORDER BY id DESC LIMIT 1"
)
TOTALS = "SELECT tbl, sum(archived), sum(pruned) FROM retention_table_run GROUP BY tbl ORDER BY tbl"
COUNTS = (
    "SELECT (SELECT count(*) FROM canonical_event),"
    " (SELECT count(*) FROM canonical_event WHERE payload IS NULL),"
    " (SELECT count(*) FROM arrival WHERE decision = 'beyond_horizon'),"
    " (SELECT count(*) FROM arrival a JOIN pending p ON p.arrival_id = a.id"
    "   WHERE a.decision = 'beyond_horizon' AND p.state = 'open' AND NOT EXISTS"
    "   (SELECT 1 FROM review_mark m WHERE m.arrival_id = a.id))"
)


async def _oldest(conn: Conn, table: str, sql: str) -> datetime | None:
    """The oldest row a prune could take. On a table partitioned by time, the rows of its DEFAULT
    and legacy partitions by their own time, and a period partition's by where it ends (they go
    with it: `prune_partitions.oldest_due`)."""
    rels = await prune_partitions.row_relations(conn, table)
    found: list[datetime] = []
    for text in [sql] if rels is None else [prune_partitions.on(sql, table, r) for r in rels]:
        cur = await conn.execute(text.encode())  # our own text
        row = await cur.fetchone()
        if row and row[0] is not None:
            found.append(row[0])
    if rels is not None:
        due = await prune_partitions.oldest_due(conn, table)
        found += [due] if due is not None else []
    await conn.rollback()
    return min(found) if found else None


async def stored_periods(conn: Conn) -> tuple[float | None, float | None]:
    """The identity horizon and the arrivals' period (seconds) of the last prune that ran, or
    (None, None): never pruned."""
    cur = await conn.execute(
        "SELECT (settings->>'identity_horizon_s')::float8, (settings->>'arrivals_s')::float8"
        " FROM retention_run WHERE NOT dry_run ORDER BY id DESC LIMIT 1"
    )
    row = await cur.fetchone()
    await conn.rollback()
    if row is None:
        return None, None
    return (None if row[0] is None else float(row[0])), (None if row[1] is None else float(row[1]))


async def read(conn: Conn) -> dict[str, Any]:
    """The retention state as one mapping (times as datetimes; `json.dumps(..., default=str)`)."""
    cur = await conn.execute(LAST_RUN)
    last = await cur.fetchone()
    cur = await conn.execute(TOTALS)
    totals = {str(r[0]): {"archived": int(r[1]), "pruned": int(r[2])} for r in await cur.fetchall()}
    oldest: dict[str, datetime | None] = {}
    for table, sql in OLDEST.items():
        oldest[table] = await _oldest(conn, table, sql)
    cur = await conn.execute(COUNTS)
    counts = await cur.fetchone()
    assert counts is not None
    cur = await conn.execute(
        # A partitioned table has no storage of its own: its partitions' sizes are added (the
        # tree of a plain table is empty here).
        "SELECT t, pg_total_relation_size(t::regclass)"
        " + (SELECT coalesce(sum(pg_total_relation_size(p.relid)), 0) FROM pg_partition_tree(t::regclass) p)"
        " FROM unnest(%s::text[]) AS t",
        (list(SIZED),),
    )
    sizes = {str(r[0]): int(r[1]) for r in await cur.fetchall()}
    cur = await conn.execute("SELECT pg_database_size(current_database())")
    db = await cur.fetchone()
    await conn.rollback()
    first = await time_partitions.oldest(conn)  # catalog reads only
    return {
        "last_prune": None
        if last is None
        else {
            "id": last[0],
            "started_at": last[1],
            "finished_at": last[2],
            "outcome": last[3],
            "error": last[4],
            "settings": last[5],
        },
        "totals": totals,
        "oldest": oldest,
        "identities": int(counts[0]),
        "identities_payload_pruned": int(counts[1]),
        "beyond_horizon": int(counts[2]),
        "beyond_horizon_open": int(counts[3]),
        "table_bytes": sizes,
        "database_bytes": int(db[0]) if db else 0,
        # the budget the last prune ran with (`retention.database_budget`; 0: none stated)
        "database_budget": int((last[5] or {}).get("database_budget", 0)) if last else 0,
        "oldest_partition": {t: None if p is None else p.name for t, p in first.items()},
        "oldest_partition_end": {t: None if p is None else p.upper for t, p in first.items()},
    }


def describe(r: dict[str, Any]) -> list[str]:
    """The state for people: `ledger check`'s lines, the overview page's."""
    last = r["last_prune"]
    if last is None:
        out = ["retention: never pruned (`retention:` in ledger.yaml, `edge-agent ledger prune`)"]
    else:
        when = last["finished_at"] or last["started_at"]
        out = [f"retention: last prune run {last['id']} {last['outcome']} at {when:%Y-%m-%d %H:%M:%S%z}"]
        if last["error"]:
            out.append(f"  the last prune stopped: {last['error']}")
    for table, t in r["totals"].items():
        out.append(f"  {table}: archived {t['archived']}, pruned {t['pruned']} (all runs)")
    for table, oldest in r["oldest"].items():
        out.append(f"  oldest {table} kept: {'none' if oldest is None else f'{oldest:%Y-%m-%d %H:%M}'}")
    out.append(
        f"  identities kept: {r['identities']} (payload pruned: {r['identities_payload_pruned']});"
        f" beyond_horizon arrivals: {r['beyond_horizon']} ({r['beyond_horizon_open']} not reviewed)"
    )
    for table, name in r.get("oldest_partition", {}).items():
        end = r["oldest_partition_end"][table]
        upto = "" if name is None or end is None else f" (rows up to {end:%Y-%m-%d %H:%M})"
        out.append(f"  oldest partition of {table}: {name or 'none (not partitioned by time)'}{upto}")
    sizes = ", ".join(f"{t} {n / 1e6:.1f} MB" for t, n in r["table_bytes"].items())
    out.append(f"  table sizes: {sizes}")
    db, budget = r.get("database_bytes", 0), r.get("database_budget", 0)
    room = " (no database_budget)"
    if budget:
        room = f" of its budget {budget / 1e9:.1f} GB ({100 * db / budget:.0f} %)"
    out.append(f"  database size: {db / 1e6:.1f} MB{room}")
    return out

"""Migration 0007 (time partitions) on a filled ledger of version 6: how long it takes.

Prints ONE JSON line: each layout's figures under `runs`. A throwaway PostgreSQL cluster of its own (tests/ledger/pgcluster.py,
fsync on) holds a version-6 ledger filled inside the server by tests/ledger/bigledger.py (`--events`
canonical events, two arrivals each, a notification per two events, conflicts, pending arrivals,
boots, anomalies, review marks), VACUUM (ANALYZE)d; then `migrations.migrate` applies 0007 and is
timed. The migration rewrites no row: it renames the tables, attaches them as the `_legacy`
partitions (one read of each to validate the bound) and builds the new keys' indexes on them.

    python bench/ledger_partition_migration.py                      # 100,000 events: 200,000 arrivals
    python bench/ledger_partition_migration.py --events 500000      # 1,000,000 arrivals
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster and big ledger

import bigledger  # noqa: E402
import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from agent.ledger import migrations  # noqa: E402
from agent.ledger.connection import connect  # noqa: E402

LAYOUT_V6 = ROOT / "tests" / "ledger" / "layout_v6.sql"


def with_sources(statements: list[str]) -> list[str]:
    """bigledger's statements with a notification `source` (NOT NULL on the by-source layout)."""
    out = []
    for s in statements:
        if s.lstrip().startswith("INSERT INTO notification"):
            s = s.replace("visible_at, sent_at)", "visible_at, sent_at, source)").replace(
                "\n       FROM generate_series(2,",
                ", 'plant/DEV-' || (g %% 500) || '/Trip'\n       FROM generate_series(2,",
            )
        out.append(s)
    return out


async def one(cluster: pgcluster.Cluster, layout: str, events: int) -> dict[str, Any]:
    name = f"mig_{layout}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}".encode())
    every = migrations.migrations()
    conn = await connect(cluster.dsn(name))
    try:
        real = migrations.migrations
        migrations.migrations = lambda: every[:6]  # type: ignore[assignment]
        try:
            await migrations.migrate(conn)
        finally:
            migrations.migrations = real  # type: ignore[assignment]
        if layout == "by_source":
            async with conn.transaction():
                await conn.execute("SELECT set_config('ledger.partitions', '8', true)")
                await conn.execute(LAYOUT_V6.read_bytes())
    finally:
        await conn.close()
    with psycopg.connect(cluster.dsn(name)) as sync:
        statements = bigledger.FILL
        if layout == "by_source":
            bigledger.FILL = with_sources(statements)
        try:
            bigledger.fill(sync, events)
        finally:
            bigledger.FILL = statements
        counts = sync.execute(
            "SELECT (SELECT count(*) FROM arrival), (SELECT count(*) FROM notification),"
            " pg_total_relation_size('arrival') + (SELECT coalesce(sum(pg_total_relation_size(relid)), 0)"
            " FROM pg_partition_tree('arrival'))"
        ).fetchone()
    assert counts is not None
    conn = await connect(cluster.dsn(name))
    try:
        t = time.perf_counter()
        applied = await migrations.migrate(conn)
        seconds = time.perf_counter() - t
    finally:
        await conn.close()
    assert applied == [7], applied
    arrivals, notifications, arrival_bytes = (int(x) for x in counts)
    return {
        "bench": "ledger_partition_migration",
        "layout": layout,
        "arrivals": arrivals,
        "notifications": notifications,
        "arrival_mb": round(arrival_bytes / 1e6, 1),
        "seconds": round(seconds, 2),
        "seconds_per_million_arrivals": round(seconds / arrivals * 1e6, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--layouts", default="plain,by_source")
    args = ap.parse_args()
    bindir = pgcluster.find_binaries()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries (initdb, pg_ctl)")
    cluster = pgcluster.create(bindir, durable=True)
    try:
        runs = [asyncio.run(one(cluster, layout, args.events)) for layout in args.layouts.split(",")]
    finally:
        cluster.destroy()
    print(json.dumps({"bench": "ledger_partition_migration", "events": args.events, "runs": runs}))


if __name__ == "__main__":
    main()

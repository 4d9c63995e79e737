"""The arbiter's rate beside the number of time partitions `arrival` has.

Prints ONE JSON line: each count's figures under `runs`, and each count's rate against the
unpartitioned ledger's (count 0) when it was measured. A throwaway PostgreSQL cluster of its own (tests/ledger/pgcluster.py,
fsync on); per count a new migrated ledger with that many day partitions (the ones before today
made empty, as a ledger keeping `arrivals: <count>d` with `partition: day` has them, minus their
rows), then `--batches` batches of `--batch` import lines with fresh keys, half of them
re-deliveries of the batch before from another gateway, through `arbiter.record`: the arbiter
reads each batch's arrival keys in every partition (`arrival_keys.READ_KNOWN`), so this is the cost
of keeping many partitions.

    python bench/ledger_partition_count.py                 # 0 (version 6: not partitioned), 1, 31, 91, 366
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster

import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from agent.core.intake import parse_delivery  # noqa: E402
from agent.ledger import arbiter, migrations, time_partitions  # noqa: E402
from agent.ledger.arrivals import Arrival  # noqa: E402
from agent.ledger.connection import connect  # noqa: E402


def batch_of(n: int, start: int, gateway: str, at: str) -> list[Arrival]:
    lines = [
        json.dumps({"source": f"P{i % 50}/T", "transitionId": f"T{i}", "bootId": "B1", "payload": {"v": i}})
        for i in range(start, start + n)
    ]
    return [
        Arrival(parse_delivery(text, arrival_at=at, receiver="bench", line=k), gateway, "import")
        for k, text in enumerate(lines, start)
    ]


async def one(cluster: pgcluster.Cluster, count: int, batches: int, size: int) -> dict[str, Any]:
    name = f"count_{count}_{time.monotonic_ns()}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}".encode())
    conn = await connect(cluster.dsn(name))
    try:
        now = datetime.now(UTC)
        if count == 0:  # the baseline: version 6, `arrival` not partitioned
            every = migrations.migrations()
            real, migrations.migrations = migrations.migrations, lambda: every[:6]  # type: ignore[assignment]
            try:
                await migrations.migrate(conn)
            finally:
                migrations.migrations = real  # type: ignore[assignment]
        else:
            await migrations.migrate(conn)
            await time_partitions.ensure(conn, "day", count - 1, now=now - timedelta(days=count - 1))
        parts = len([p for p in await time_partitions.partitions(conn, "arrival") if not p.default])
        at = now.isoformat().replace("+00:00", "Z")
        t = time.perf_counter()
        for b in range(batches):
            half = size // 2
            fresh = batch_of(half, b * half, "gw-1", at)
            again = batch_of(half, max(0, (b - 1) * half), "gw-2", at)
            await arbiter.record(conn, fresh + again, now=now)
        seconds = time.perf_counter() - t
    finally:
        await conn.close()
    arrivals = batches * size
    return {
        "bench": "ledger_partition_count",
        "partitions": parts,
        "arrivals": arrivals,
        "batch": size,
        "seconds": round(seconds, 2),
        "arrivals_per_s": round(arrivals / seconds),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="0,1,31,91,366")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    bindir = pgcluster.find_binaries()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries (initdb, pg_ctl)")
    cluster = pgcluster.create(bindir, durable=True)
    try:
        runs = [asyncio.run(one(cluster, int(c), args.batches, args.batch)) for c in args.counts.split(",")]
    finally:
        cluster.destroy()
    base = next((r["arrivals_per_s"] for r in runs if r["partitions"] == 0), None)
    for r in runs:
        if base:
            r["vs_unpartitioned"] = round(r["arrivals_per_s"] / base, 3)
    print(json.dumps({"bench": "ledger_partition_count", "batch": args.batch, "runs": runs}))


if __name__ == "__main__":
    main()

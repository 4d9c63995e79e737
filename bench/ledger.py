"""Ledger intake benchmark: deliveries/s through the ledger's arbitration vs two same-run baselines.

Prints ONE JSON line. Against a throwaway PostgreSQL cluster of its own (initdb + pg_ctl; fsync
and synchronous_commit on, the server's defaults), in batches of 1,000 deliveries of ~600 B per
transaction, at 0 % and 50 % duplicates, alternated over rounds (medians):

* `copy_ceiling`: a raw `COPY` of the same rows into an unindexed table (nothing decided);
* `bare_set_based`: the simplest correct arbitration: COPY into a temp stage table, then
  `INSERT ... SELECT ... ON CONFLICT DO NOTHING` of the canonical rows and the arrivals in SQL;
* `ledger`: `agent.ledger.arbiter.record` (what `ledger import` and both intakes call) on the
  same deliveries, already parsed (parsing is the importer's, the same for every variant).

Each variant starts on a fresh database (from one migrated template) in every round.

    python bench/ledger.py             # 100,000 deliveries per variant, 3 rounds
    python bench/ledger.py --quick     # a few thousand, for a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster

import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from agent.core.contract import Delivery, payload_hash  # noqa: E402
from agent.ledger import arbiter, migrations  # noqa: E402
from agent.ledger.arrivals import Arrival  # noqa: E402
from agent.ledger.connection import connect  # noqa: E402

BATCH = 1000
PAD = "x" * 480  # ~600 B per delivery with the rest of the payload and the key
ARRIVAL = "2026-04-22T08:00:12.180Z"

BASELINE_TABLES = """
CREATE TABLE raw_copy (source text, transition_id text, boot_id text, gateway text, arrived_at timestamptz,
                       payload_hash text, payload text, raw bytea);
CREATE TABLE b_canonical (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, source text NOT NULL,
    transition_id text NOT NULL, boot_id text NOT NULL, payload_hash text NOT NULL, payload text NOT NULL,
    first_gateway text NOT NULL, first_seen_at timestamptz NOT NULL, UNIQUE (source, transition_id, boot_id));
CREATE TABLE b_arrival (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, canonical_id bigint NOT NULL,
    decision text NOT NULL, source text, transition_id text, boot_id text, gateway text NOT NULL,
    arrived_at timestamptz NOT NULL, received_at timestamptz NOT NULL DEFAULT now(), via text NOT NULL,
    payload_hash text NOT NULL, raw bytea NOT NULL);
CREATE INDEX b_arrival_canonical ON b_arrival (canonical_id);
"""

STAGE = (
    "CREATE TEMP TABLE stage (seq int, source text, transition_id text, boot_id text, gateway text,"
    " arrived_at timestamptz, payload_hash text, payload text, raw bytea) ON COMMIT DROP"
)
BARE_CANONICAL = """
INSERT INTO b_canonical (source, transition_id, boot_id, payload_hash, payload, first_gateway, first_seen_at)
SELECT DISTINCT ON (source, transition_id, boot_id) source, transition_id, boot_id, payload_hash, payload,
       gateway, arrived_at
FROM stage ORDER BY source, transition_id, boot_id, seq
ON CONFLICT (source, transition_id, boot_id) DO NOTHING
"""
BARE_ARRIVALS = """
INSERT INTO b_arrival (canonical_id, decision, source, transition_id, boot_id, gateway, arrived_at, via,
                       payload_hash, raw)
SELECT c.id, CASE WHEN c.payload_hash = s.payload_hash THEN 'duplicate' ELSE 'conflict' END,
       s.source, s.transition_id, s.boot_id, s.gateway, s.arrived_at, 'import', s.payload_hash, s.raw
FROM stage s JOIN b_canonical c
  ON c.source = s.source AND c.transition_id = s.transition_id AND c.boot_id = s.boot_id
ORDER BY s.seq
"""


def deliveries(n: int, dup_share: float) -> list[Delivery]:
    """n deliveries; with dup_share 0.5 every key comes twice (the second a batch or more later)."""
    keys = n if dup_share == 0 else round(n * (1 - dup_share))
    out: list[Delivery] = []
    for i in range(n):
        k = i if i < keys else (i - keys)
        ts = f"2026-04-22T08:{(k // 1000) % 60:02d}:{(k // 10) % 60:02d}.{k % 1000:03d}Z"
        payload = {"state": "Trip", "severity": "High", "pad": PAD}
        text = json.dumps(payload, separators=(",", ":"))
        out.append(
            Delivery(
                source=f"PUMP-{k % 200:03d}/Trip",
                transition_id=str(k),
                boot_id="B17",
                source_timestamp=ts,
                arrival_at=ARRIVAL,
                payload=payload,
                payload_hash=payload_hash(payload, ts),
                raw=text,
                receiver="bench",
                payload_json=text,
                line=i + 1,  # an import line: its number is part of its arrival key
            )
        )
    return out


def rows_of(items: list[Delivery]) -> list[tuple[Any, ...]]:
    at = datetime.fromisoformat(ARRIVAL)
    return [
        (
            d.source,
            d.transition_id,
            d.boot_id,
            "gw-a",
            at,
            d.payload_hash,
            d.payload_json,
            str(d.raw).encode(),
        )
        for d in items
    ]


async def copy_ceiling(dsn: str, items: list[Delivery]) -> None:
    rows = rows_of(items)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for start in range(0, len(rows), BATCH):
            async with (
                conn.transaction(),
                conn.cursor() as cur,
                cur.copy(
                    "COPY raw_copy (source, transition_id, boot_id, gateway, arrived_at, payload_hash, payload,"
                    " raw) FROM STDIN"
                ) as cp,
            ):
                for r in rows[start : start + BATCH]:
                    await cp.write_row(r)


async def bare_set_based(dsn: str, items: list[Delivery]) -> None:
    rows = rows_of(items)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for start in range(0, len(rows), BATCH):
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(STAGE)
                async with cur.copy(
                    "COPY stage (seq, source, transition_id, boot_id, gateway, arrived_at, payload_hash, payload,"
                    " raw) FROM STDIN"
                ) as cp:
                    for i, r in enumerate(rows[start : start + BATCH]):
                        await cp.write_row((i, *r))
                await cur.execute(BARE_CANONICAL)
                await cur.execute(BARE_ARRIVALS)


async def ledger(dsn: str, items: list[Delivery]) -> None:
    arrivals = [Arrival(d, "gw-a", "import") for d in items]
    conn = await connect(dsn)
    try:
        for start in range(0, len(arrivals), BATCH):
            await arbiter.record(conn, arrivals[start : start + BATCH])
    finally:
        await conn.close()


VARIANTS = {"copy_ceiling": copy_ceiling, "bare_set_based": bare_set_based, "ledger": ledger}


def fresh_db(cluster: pgcluster.Cluster) -> str:
    name = "b_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE bench_template")
    return cluster.dsn(name)


def drop_db(cluster: pgcluster.Cluster, dsn: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name}")


async def make_template(cluster: pgcluster.Cluster) -> None:
    with psycopg.connect(cluster.dsn(), autocommit=True) as c:
        c.execute("CREATE DATABASE bench_template")
    conn = await connect(cluster.dsn("bench_template"))
    try:
        await migrations.migrate(conn)
        await conn.execute(BASELINE_TABLES.encode())
        await conn.commit()
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few thousand deliveries, 3 rounds (smoke)")
    ap.add_argument("-n", type=int, default=None, help="deliveries per variant and round (default 100000)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.n or (3000 if args.quick else 100_000)
    bindir = pgcluster.find_binaries()
    if bindir is None:
        print("bench/ledger.py: no PostgreSQL server binaries (initdb, pg_ctl)", file=sys.stderr)
        sys.exit(2)
    cluster = pgcluster.create(bindir, durable=True)
    try:
        asyncio.run(make_template(cluster))
        data = {dup: deliveries(n, dup / 100) for dup in (0, 50)}
        rates: dict[str, list[float]] = {}
        names = list(VARIANTS)
        for rnd in range(args.rounds):
            order = names if rnd % 2 == 0 else names[::-1]  # alternate, so drift hits every variant alike
            for dup in (0, 50):
                for name in order:
                    dsn = fresh_db(cluster)
                    t0 = time.perf_counter()
                    asyncio.run(VARIANTS[name](dsn, data[dup]))
                    elapsed = time.perf_counter() - t0
                    rates.setdefault(f"{name}_dup{dup}", []).append(n / elapsed)
                    drop_db(cluster, dsn)
        out: dict[str, Any] = {"bench": "ledger", "deliveries": n, "batch": BATCH, "rounds": args.rounds}
        for key, values in rates.items():
            out[key] = round(statistics.median(values))
        for dup in (0, 50):
            out[f"ledger_vs_bare_dup{dup}"] = round(
                out[f"ledger_dup{dup}"] / out[f"bare_set_based_dup{dup}"], 3
            )
            out[f"ledger_vs_copy_dup{dup}"] = round(
                out[f"ledger_dup{dup}"] / out[f"copy_ceiling_dup{dup}"], 3
            )
        out["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(json.dumps(out))
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()

"""Store ingest benchmark: arrivals/s through the batch decision path vs the raw executemany ceiling.

Prints ONE JSON line. Every figure is measured in this run on this machine. The headline
comparison, `decision_vs_raw_batch1000` (the store's batch decision path against a plain
executemany of the same rows into the same tables and indexes, same pragmas,
synchronous=FULL, batches of 1,000, empty store, no repeats), alternates the two
`--rounds` times (default 3) on fresh stores and compares medians. The other cases
(batch sizes, repeats, a big store) are one sample each, for shape, not for ratios.

    python bench/ingest.py              # full: includes a 1,000,000-event store
    python bench/ingest.py --quick      # smaller, for a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.core.contract import Delivery, payload_hash
from agent.store.store import Store
from bench.rounds import alternate_async, median, ratio, rss_peak_mb

ARRIVAL = "2026-04-22T08:00:12.180Z"


def deliveries(n: int, dup_ratio: float, offset: int = 0) -> list[Delivery]:
    """n deliveries; a share `dup_ratio` of them repeats an earlier key of the same list."""
    out: list[Delivery] = []
    fresh = 0
    for i in range(n):
        if dup_ratio and out and i % round(1 / dup_ratio) == 1:
            prev = out[(i * 7919) % len(out)]
            out.append(prev)
            continue
        k = offset + fresh
        fresh += 1
        ts = f"2026-04-22T08:{(k // 1000) % 60:02d}:{(k // 10) % 60:02d}.{k % 1000:03d}Z"
        payload = {"state": "Trip" if k % 2 else "Normal", "severity": "High"}
        out.append(
            Delivery(
                source=f"PUMP-{k % 200:03d}/Trip",
                transition_id=str(k),
                boot_id="B17",
                source_timestamp=ts,
                arrival_at=ARRIVAL,
                payload=payload,
                payload_hash=payload_hash(payload, ts),
                raw=json.dumps(
                    {"source": f"PUMP-{k % 200:03d}/Trip", "transitionId": str(k), "payload": payload}
                ),
                receiver="bench",
            )
        )
    return out


async def decision_rate(path: str, items: list[Delivery], batch: int) -> float:
    store = await Store.open(path, check=False)
    try:
        t0 = time.perf_counter()
        for i in range(0, len(items), batch):
            await store.record(items[i : i + batch])
        return len(items) / (time.perf_counter() - t0)
    finally:
        await store.close()


def raw_rate(path: str, items: list[Delivery], batch: int) -> float:
    """Plain executemany of the same rows into the same tables (no decision) with the same pragmas."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    (base,) = con.execute("SELECT coalesce(max(arrival_id), 0) FROM arrivals").fetchone()
    t0 = time.perf_counter()
    for i in range(0, len(items), batch):
        chunk = items[i : i + batch]
        con.execute("BEGIN IMMEDIATE")
        con.executemany(
            "INSERT OR IGNORE INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
            " first_arrival, last_arrival, first_arrival_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    d.source,
                    d.transition_id,
                    d.boot_id,
                    "PUMP",
                    d.source_timestamp,
                    d.payload_json,
                    d.payload_hash,
                    d.arrival_at,
                    d.arrival_at,
                    base + i + j + 1,
                )
                for j, d in enumerate(chunk)
            ],
        )
        con.executemany(
            "INSERT INTO arrivals(arrival_id, source, transition_id, boot_id, source_ts, arrival_at, receiver,"
            " payload_hash, decision, canonical_id, reason, flags, line, live, raw)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    base + i + j + 1,
                    d.source,
                    d.transition_id,
                    d.boot_id,
                    d.source_timestamp,
                    d.arrival_at,
                    d.receiver,
                    d.payload_hash,
                    "inserted",
                    None,
                    None,
                    "",
                    None,
                    1,
                    d.raw,
                )
                for j, d in enumerate(chunk)
            ],
        )
        con.execute("COMMIT")
    rate = len(items) / (time.perf_counter() - t0)
    con.close()
    return rate


async def fresh_store(directory: str, name: str, prefill: int) -> str:
    path = os.path.join(directory, name)
    store = await Store.open(path)
    await store.close()
    if prefill:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=OFF")  # setup only; measured runs use FULL
        step = 50_000
        for start in range(0, prefill, step):
            con.execute("BEGIN")
            con.executemany(
                "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
                " first_arrival, last_arrival, first_arrival_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        f"OLD-{k % 500:03d}/Trip",
                        str(k),
                        "B1",
                        "OLD",
                        None,
                        "{}",
                        "0" * 64,
                        ARRIVAL,
                        ARRIVAL,
                        k + 1,
                    )
                    for k in range(start, min(prefill, start + step))
                ],
            )
            con.executemany(
                "INSERT INTO arrivals(arrival_id, source, transition_id, boot_id, arrival_at, receiver, payload_hash,"
                " decision, canonical_id, raw) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        k + 1,
                        f"OLD-{k % 500:03d}/Trip",
                        str(k),
                        "B1",
                        ARRIVAL,
                        "prefill",
                        "0" * 64,
                        "inserted",
                        k + 1,
                        "{}",
                    )
                    for k in range(start, min(prefill, start + step))
                ],
            )
            con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    return path


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of the headline comparison")
    args = ap.parse_args()
    n = 5_000 if args.quick else 100_000
    n_batch1 = 500 if args.quick else 3_000
    big = 20_000 if args.quick else 1_000_000
    result: dict[str, object] = {"bench": "ingest", "synchronous": "FULL", "sqlite": sqlite3.sqlite_version}
    with tempfile.TemporaryDirectory() as tmp:
        template = await fresh_store(tmp, "template-big.db", big)
        for dup in (0.0, 0.5):
            for batch in (1, 100, 1000):
                items = deliveries(n_batch1 if batch == 1 else n, dup)
                path = await fresh_store(tmp, f"d{dup}-{batch}.db", 0)
                result[f"empty_dup{int(dup * 100)}_batch{batch}"] = round(
                    await decision_rate(path, items, batch)
                )
            items = deliveries(n, dup, offset=10_000_000)
            path = os.path.join(tmp, f"big-{dup}.db")
            shutil.copyfile(template, path)
            result[f"big_dup{int(dup * 100)}_batch1000"] = round(await decision_rate(path, items, 1000))
        items = deliveries(n, 0.0)
        runs = iter(range(10_000))

        async def agent() -> float:
            return await decision_rate(await fresh_store(tmp, f"alt-a{next(runs)}.db", 0), items, 1000)

        async def raw() -> float:
            return raw_rate(await fresh_store(tmp, f"alt-r{next(runs)}.db", 0), items, 1000)

        agent_rates, raw_rates = await alternate_async(args.rounds, agent, raw)
    result["store_events_big"] = big
    result["n_per_case"] = n
    result["rounds"] = args.rounds
    result["decision_batch1000_per_s"] = round(median(agent_rates))
    result["raw_executemany_batch1000"] = round(median(raw_rates))
    result["decision_vs_raw_batch1000"] = ratio(agent_rates, raw_rates)
    result["decision_rounds"] = [round(x) for x in agent_rates]
    result["raw_rounds"] = [round(x) for x in raw_rates]
    result["rss_peak_mb"] = round(rss_peak_mb(), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())

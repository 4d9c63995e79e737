"""Retention benchmark: N events ingested and delivered, with pruning running vs without.

Prints ONE JSON line. Simulated time: the N events arrive evenly over
SPAN_DAYS days (clock injected), one upstream acknowledges every batch right
after it is recorded (as a forwarder would), and in the pruning run a
background task prunes continuously with horizons arrivals 2d, payloads 4d,
keys 8d. Both runs are measured in this process on this machine:

* `recorder_ratio`: recorder throughput (record + acknowledge, per batch of
  1000) with pruning running / without. Target >= 0.8.
* `size_bound_bytes`: the stated bound for the pruned store: 1.25 x the
  bytes per fully kept event (measured in the run without pruning) x the
  events inside the payload horizon, plus KEY_RECORD_BYTES per key inside the
  key horizon. The recorder runs flat out here, far above a gateway's rate,
  and the pruner is paced to `duty` 0.2 of the lock, so it lags during
  ingest: `size_within_bound` is checked after one unpaced catch-up run at
  the end; `max_size_pruned_bytes` (largest size seen while ingesting) and
  `size_pruned_at_end_of_ingest_bytes` show the lag.

    python bench/retention.py            # N = 1,000,000
    python bench/retention.py --quick    # N = 60,000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config.retention import RetentionSettings
from agent.core.contract import Delivery, payload_hash
from agent.core.timestamps import format_timestamp
from agent.store.prune import PruneTotals, prune
from agent.store.store import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPAN_DAYS = 20
BATCH = 1000
KEY_RECORD_BYTES = 200  # stated upper bound per compact key record, index included
SETTINGS = RetentionSettings(
    arrivals=timedelta(days=2), payloads=timedelta(days=4), keys=timedelta(days=8), batch_rows=2000
)


def batch_of(start: int, n: int, total: int) -> list[Delivery]:
    out = []
    for k in range(start, start + n):
        at = format_timestamp(T0 + timedelta(seconds=k * SPAN_DAYS * 86400 / total))
        payload = {"state": "Trip" if k % 2 else "Normal", "severity": "High"}
        src = f"PUMP-{k % 200:03d}/Trip"
        out.append(
            Delivery(
                source=src, transition_id=str(k), boot_id="B17", source_timestamp=at, arrival_at=at,
                payload=payload, payload_hash=payload_hash(payload, at),
                raw=json.dumps({"source": src, "transitionId": str(k), "bootId": "B17", "payload": payload}),
                receiver="bench",
            )
        )  # fmt: skip
    return out


def size_of(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def run(path: str, n: int, pruning: bool) -> dict[str, float]:
    store = await Store.open(path, check=False)
    await store.register_upstreams([("upstream", "none")], format_timestamp(T0))
    now = T0
    done = asyncio.Event()
    totals: list[PruneTotals] = []
    max_size = 0

    async def pruner() -> None:
        nonlocal max_size
        while not done.is_set():
            totals.append(await prune(store, SETTINGS, now))
            max_size = max(max_size, size_of(path))
            await asyncio.sleep(0.05)

    task = asyncio.create_task(pruner(), name="pruner") if pruning else None
    busy = 0.0
    try:
        for start in range(0, n, BATCH):
            items = batch_of(start, min(BATCH, n - start), n)  # generated outside the measured time
            t0 = time.perf_counter()
            await store.record(items)
            await store.outbox.deliver_all_pending("upstream", items[-1].arrival_at)
            busy += time.perf_counter() - t0
            now = datetime.fromisoformat(items[-1].arrival_at.replace("Z", "+00:00"))
        done.set()
        if task is not None:
            await task
            lagging = size_of(path)
            # The recorder ran flat out (a gateway's never does): let the pruner catch up unpaced.
            totals.append(await prune(store, replace(SETTINGS, duty=1.0), now))
    finally:
        await store.close()
    return {
        "rate": n / busy,
        "size": size_of(path),
        "max_size": max(max_size, size_of(path)),
        "size_at_end_of_ingest": lagging if pruning else size_of(path),
        "prune_runs": len(totals),
        "pruned_arrivals": sum(t.arrivals for t in totals),
        "pruned_payloads": sum(t.payloads for t in totals),
        "keys_forgotten": sum(t.keys_forgotten for t in totals),
        "longest_batch_ms": max((t.longest_batch_s for t in totals), default=0.0) * 1000,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="N = 60,000 (smoke run)")
    ap.add_argument("-n", type=int, help="number of events")
    args = ap.parse_args()
    n = args.n or (60_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        without = await run(os.path.join(tmp, "plain.db"), n, pruning=False)
        with_ = await run(os.path.join(tmp, "pruned.db"), n, pruning=True)
    per_event = without["size"] / n
    per_day = n / SPAN_DAYS
    bound = (
        1.25 * per_event * per_day * SETTINGS.payloads.days + KEY_RECORD_BYTES * per_day * SETTINGS.keys.days
    )
    result = {
        "bench": "retention",
        "n_events": n,
        "span_days": SPAN_DAYS,
        "horizons_days": {"arrivals": 2, "payloads": 4, "keys": 8},
        "synchronous": "FULL",
        "sqlite": sqlite3.sqlite_version,
        "rate_without_pruning": round(without["rate"]),
        "rate_with_pruning": round(with_["rate"]),
        "recorder_ratio": round(with_["rate"] / without["rate"], 3),
        "recorder_ratio_target": 0.8,
        "size_without_pruning_bytes": int(without["size"]),
        "size_pruned_bytes": int(with_["size"]),
        "size_pruned_at_end_of_ingest_bytes": int(with_["size_at_end_of_ingest"]),
        "max_size_pruned_bytes": int(with_["max_size"]),
        "size_bound_bytes": int(bound),
        "size_within_bound": with_["size"] <= bound,
        "prune_runs": with_["prune_runs"],
        "pruned_arrivals": with_["pruned_arrivals"],
        "pruned_payloads": with_["pruned_payloads"],
        "keys_forgotten": with_["keys_forgotten"],
        "longest_prune_batch_ms": round(with_["longest_batch_ms"], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())

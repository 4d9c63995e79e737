"""Salvage benchmark: how long a start takes when the store is damaged and its backlog is taken over.

Prints ONE JSON line; it drives the real `open_store` (move aside, new store, salvage) and must
not change it.

A store with a backlog of N undelivered events (one upstream; synchronous=FULL) is built once.
Each round copies it, overwrites a few b-tree pages in the copy, and times `open_store` on it
(detect, move aside, salvage); the baseline, alternated with it in the same run, times
`open_store` on an intact copy (open, quick_check, migrate). Medians over the rounds; peak RSS
is sampled from /proc during the salvage.

    python bench/salvage.py                # 100,000 undelivered events, 5 rounds
    python bench/salvage.py --events 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config.loader import Config, StoreConfig
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.service.store_open import open_store
from agent.store.store import Store

ARRIVAL = "2026-04-22T08:00:12.180Z"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def delivery(n: int) -> Delivery:
    obj = {
        "source": f"PUMP-{n % 10:02d}/Trip",
        "transitionId": str(n),
        "bootId": "B1",
        "sourceTimestamp": ARRIVAL,
        "payload": {"state": "Trip", "severity": "High", "n": n, "text": "x" * 200},
    }
    got = parse_delivery(json.dumps(obj), arrival_at=ARRIVAL, receiver="bench")
    assert isinstance(got, Delivery)
    return got


async def build(path: Path, events: int) -> None:
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], ARRIVAL)
    for start in range(0, events, 2000):
        await store.record([delivery(n) for n in range(start, min(events, start + 2000))])
    await store.close()


def damage(db: Path, seed: int) -> None:
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    btree = [n for n in range(3, len(data) // size + 1) if data[(n - 1) * size] in (2, 5, 10, 13)]
    rng = random.Random(seed)
    for n in rng.sample(btree, 3):
        data[(n - 1) * size : n * size] = rng.randbytes(size)
    db.write_bytes(bytes(data))


async def timed_open(db: Path) -> tuple[float, float, dict[str, Any] | None]:
    cfg = Config("bench", "gw-bench", StoreConfig(str(db), reserve=0), ())
    peak = rss_mb()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    store, _alarm, report = await open_store(str(db), cfg, lambda: datetime.now(UTC))
    took = time.perf_counter() - t0
    done.set()
    await sampler
    await store.close()
    return took, peak, report.as_dict() if report is not None else None


async def main(events: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        master = work / "master.db"
        await build(master, events)
        salvage_s, plain_s, peaks, reports = [], [], [], []
        for r in range(rounds):
            for kind in ("salvage", "plain"):  # alternated, same run
                rdir = work / f"{kind}-{r}"
                rdir.mkdir()
                db = rdir / "events.db"
                shutil.copyfile(master, db)
                if kind == "salvage":
                    damage(db, seed=r)
                took, peak, report = await timed_open(db)
                if kind == "salvage":
                    salvage_s.append(took)
                    peaks.append(peak)
                    reports.append(report)
                else:
                    plain_s.append(took)
                shutil.rmtree(rdir)
        taken = [rep["outbox_rows"] for rep in reports if rep is not None]
        return {
            "bench": "salvage",
            "undelivered_events": events,
            "rounds": rounds,
            "store_mb": round(master.stat().st_size / 1e6, 1),
            "salvage_start_s_median": round(statistics.median(salvage_s), 3),
            "intact_start_s_median": round(statistics.median(plain_s), 3),
            "salvaged_rows_per_s": round(statistics.median(taken) / statistics.median(salvage_s)),
            "salvaged_outbox_rows_median": statistics.median(taken),
            "unreadable_rows_median": statistics.median(
                [rep["unreadable_rows"] for rep in reports if rep is not None]
            ),
            "peak_rss_mb_max": round(max(peaks), 1),
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.events, args.rounds))))

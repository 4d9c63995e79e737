"""What the backlog drain benches share (bench/replay.py, bench/sparkplug.py): the backlog's events,
the template store they are recorded into once, a fresh copy of it for every round, and the watch
over a forwarder draining it."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from agent.core.contract import Delivery, payload_hash
from agent.store.store import Store
from bench.rounds import rss_mb

ARRIVAL = "2026-04-22T08:00:12.180Z"


def delivery(n: int, source: str, ts: str) -> Delivery:
    """Event `n` of the backlog: a Trip of `source` at `ts` with a 200-character text."""
    payload = {"state": "Trip", "severity": "High", "n": n, "text": "x" * 200}
    return Delivery(
        source=source,
        transition_id=str(n),
        boot_id="B17",
        source_timestamp=ts,
        arrival_at=ARRIVAL,
        payload=payload,
        payload_hash=payload_hash(payload, ts),
        raw="{}",
        receiver="bench",
    )


async def make_template(path: Path, names: list[str], total: int, event: Callable[[int], Delivery]) -> float:
    """Record `event(0..total-1)` for every upstream in `names`; seconds it took."""
    store = await Store.open(path)
    try:
        await store.register_upstreams([(name, "none") for name in names], ARRIVAL)
        t0 = time.perf_counter()
        for start in range(0, total, 5000):
            await store.record([event(n) for n in range(start, min(total, start + 5000))])
        return time.perf_counter() - t0
    finally:
        await store.close()


def copy_store(template: Path, to: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        with_suffix = to.with_name(to.name + suffix)
        if with_suffix.exists():
            with_suffix.unlink()
    shutil.copyfile(template, to)  # the template is closed, so its WAL is checkpointed away
    # On disk before the clock starts, for both sides: a gateway's store is not a fresh copy in the
    # page cache, and the first checkpoint's sync of the database file would otherwise write the
    # whole copy back inside the timed drain (about 12 ms; the agent reached it at 30,000 events,
    # the baseline's fewer WAL frames did not: docs/performance-history.md, HTTP replay, eighth round).
    fd = os.open(to, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return to


async def watch_drain(
    task: asyncio.Task[None], drained: Callable[[], bool], state: Callable[[], object], peak: float
) -> float:
    """Wait until `drained()` while `task` (the forwarder) runs; the peak RSS (MB, from `peak`).

    The end is looked for every 5 ms (it was 50 ms: up to 50 ms, 25 on average, of a drain of
    300-900 ms were the bench's polling); RSS is sampled every 50 ms. A forwarder that stops
    first is a RuntimeError naming its `state()`.
    """
    ticks = 0
    while not drained():
        await asyncio.sleep(0.005)
        ticks += 1
        if not ticks % 10:
            peak = max(peak, rss_mb())
        if task.done():
            raise RuntimeError(f"forwarder stopped early: {state()}")
    return peak

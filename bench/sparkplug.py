"""Sparkplug backlog drain: events/s from the outbox through the Sparkplug upstream to Mosquitto,
vs a bare aiomqtt publisher of the same encoded payloads at QoS 0, in the same run.

Prints ONE JSON line; it drives the real store and the real `SparkplugForwarder` and must not
change them.

A backlog of N events (default 30,000; 10 devices) is recorded once (synchronous=FULL) into a
template store; every agent round drains a fresh copy: CONNECT (Will NDEATH, bdSeq committed in
the store), NBIRTH and a DBIRTH per device from the store's live values, then claim (attempts
committed), map every row to its metrics, encode and publish one DDATA per row at QoS 0. The
clock stops when every row is published and written to the socket (QoS 0: nothing more to wait
for; the delivery window of 2 x keepalive is not part of a drain's speed). The baseline is bare
aiomqtt publishing the agent's own payloads (same topics, same bytes, encoded before its clock
starts) at QoS 0, 500 publish calls awaited together at a time, connect included, no store.
Rounds alternate (`--rounds`, default 3), medians. Peak RSS of this process is sampled during
each drain; `--agent-only` skips the baseline (for the memory check of a long drain).

    python bench/sparkplug.py                                     # 30,000 events, 3 rounds
    python bench/sparkplug.py --events 300 --rounds 2             # smoke
    python bench/sparkplug.py --events 1000000 --rounds 1 --agent-only   # memory check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sparkplug"))

import aiomqtt  # noqa: E402
from sparkplug_parts import MOSQUITTO, Broker  # noqa: E402

from agent.config.sparkplug import SparkplugUpstream  # noqa: E402
from agent.core.contract import Delivery  # noqa: E402
from agent.service.runtime import tuned_process  # noqa: E402
from agent.sparkplug import mapping  # noqa: E402
from agent.sparkplug.forwarder import SparkplugForwarder  # noqa: E402
from agent.sparkplug.host import topic  # noqa: E402
from agent.sparkplug.payload import encode, payload  # noqa: E402
from agent.store.store import Store  # noqa: E402
from bench import backlog  # noqa: E402
from bench.backlog import copy_store, watch_drain  # noqa: E402
from bench.rounds import alternate_async, median, ratio, rss_mb, rss_peak_mb  # noqa: E402

SITE, GW, GROUP, UP = "bench", "gw-bench", "plant-1", "ignition"
DEVICES = [f"PUMP-{d:02d}" for d in range(10)]
BOOTS = len(DEVICES)  # one boot_observed row per device rides along in the outbox


def delivery(n: int) -> Delivery:
    ts = f"2026-04-22T08:{(n // 60000) % 60:02d}:{(n // 1000) % 60:02d}.{n % 1000:03d}Z"
    return backlog.delivery(n, f"{DEVICES[n % len(DEVICES)]}/Trip", ts)


def settings(url: str) -> SparkplugUpstream:
    # keepalive 1 h: W = 2 h, so nothing turns delivered inside a drain (the window is not speed)
    return SparkplugUpstream(UP, url, group_id=GROUP, edge_node_id=GW, keepalive_s=3600.0)


async def agent_drain(path: Path, url: str, total: int) -> dict[str, float]:
    store = await Store.open(path)
    fwd = SparkplugForwarder(
        store,
        settings(url),
        site=SITE,
        gateway=GW,
        devices=[(d, ("Trip",)) for d in DEVICES],
        idle_poll_s=0.05,
    )
    stop = asyncio.Event()
    start_rss = peak = rss_mb()
    t0 = time.perf_counter()
    task = asyncio.create_task(fwd.run(stop))

    def drained() -> bool:
        s = fwd._session
        return fwd.state.published >= total + BOOTS and s is not None and s._unwritten == 0

    try:
        peak = await watch_drain(task, drained, lambda: fwd.state, peak)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        await task
        await fwd.close()
        await store.close()
    return {"s": elapsed, "rate": total / elapsed, "rss_start_mb": start_rss, "rss_peak_mb": peak}


async def agent_messages(path: Path) -> list[tuple[str, bytes]]:
    """The agent's own DDATA of every row (same mapping and encoder), encoded before any clock."""
    store = await Store.open(path)
    out: list[tuple[str, bytes]] = []
    try:
        after = 0
        while True:
            claimed = await store.outbox.claim_rows(UP, 5000, after=after)
            if not claimed:
                break
            after = claimed.rows[-1][0]
            for row in claimed.rows:
                entry = claimed.entry(row)
                if entry.kind != "transition":
                    continue
                rm = mapping.row_metrics(
                    entry,
                    site=SITE,
                    historical=True,
                    declared=frozenset({"Trip/State"}),
                    gateway=GW,
                    store_id=store.store_id,
                )
                body = encode(payload(rm.metrics), int(time.time() * 1000), len(out) % 256)
                out.append((topic(GROUP, "DDATA", GW, mapping.device_id(rm.device or "")), body))
    finally:
        await store.close()
    return out


async def bare_drain(port: int, messages: list[tuple[str, bytes]]) -> dict[str, float]:
    t0 = time.perf_counter()
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=f"bare-{os.getpid()}", clean_session=True
    ) as client:
        for start in range(0, len(messages), 500):
            await asyncio.gather(*(client.publish(t, b, qos=0) for t, b in messages[start : start + 500]))
    elapsed = time.perf_counter() - t0
    return {"s": elapsed, "rate": len(messages) / elapsed}


async def main(total: int, rounds: int, agent_only: bool) -> dict[str, Any]:
    if MOSQUITTO is None:
        raise SystemExit("mosquitto is not installed")
    work = Path(tempfile.mkdtemp(prefix="bench-sparkplug-"))
    broker = Broker(work)
    try:
        template = work / "template.db"
        await backlog.make_template(template, [UP], total, delivery)
        messages = [] if agent_only else await agent_messages(copy_store(template, work / "probe.db"))
        n = 0

        async def agent() -> dict[str, float]:
            nonlocal n
            n += 1
            return await agent_drain(copy_store(template, work / f"a{n}.db"), broker.url, total)

        async def bare() -> dict[str, float]:
            return await bare_drain(broker.port, messages)

        with tuned_process():
            if agent_only:
                a = [await agent() for _ in range(rounds)]
                b: list[dict[str, float]] = []
            else:
                a, b = await alternate_async(rounds, agent, bare)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {
        "bench": "sparkplug",
        "events": total,
        "rounds": rounds,
        "events_per_s": round(median([r["rate"] for r in a])),
        "drain_s": round(median([r["s"] for r in a]), 3),
        "rss_start_mb": round(median([r["rss_start_mb"] for r in a]), 1),
        "rss_peak_mb": round(max(r["rss_peak_mb"] for r in a), 1),
        "process_peak_rss_mb": round(rss_peak_mb(), 1),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    if b:
        out["bare_aiomqtt_qos0_per_s"] = round(median([r["rate"] for r in b]))
        out["ratio_vs_bare"] = ratio([r["rate"] for r in a], [r["rate"] for r in b])
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=30_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--agent-only", action="store_true")
    args = p.parse_args()
    print(json.dumps(asyncio.run(main(args.events, args.rounds, args.agent_only))))

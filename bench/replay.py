"""Backlog drain benchmark: events/s from the outbox to Mosquitto and to the recording receiver.

Prints ONE JSON line; it drives the real store and forwarder and must not change them.

A backlog of N events is recorded (synchronous=FULL), then drained by the real
forwarder (claim, encode, publish, settle) to the local Mosquitto (one event per
message, QoS 1, 100 in flight) and to the recording HTTP receiver (a subprocess;
batches of 500). In the same run, the baselines send the same messages with no
store at all: a bare aiomqtt QoS 1 publish loop with the same window, and a bare
aiohttp POST loop of the same batches. Peak RSS is sampled from /proc during each
drain. `--sinks` picks the drains (and their baselines) to run.

    python bench/replay.py                 # 100,000 events
    python bench/replay.py --events 1000000
    python bench/replay.py --quick         # 10,000 events, a smoke run
    python bench/replay.py --sinks http    # only the HTTP drain (no broker needed)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import aiomqtt

from agent.config.upstreams import HttpUpstream, MqttUpstream, Upstream
from agent.core.contract import Delivery, payload_hash
from agent.core.records import Entry, Transition
from agent.service.forwarder import Forwarder, build_sink
from agent.sinks.encode import batch_body, encode, render_topic
from agent.store.store import Store

ARRIVAL = "2026-04-22T08:00:12.180Z"
SITE, GW = "bench", "gw-bench"
STORE_ID = "00000000-0000-4000-8000-000000000000"
SOURCES = [f"PUMP-{d:02d}/Trip" for d in range(10)]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def delivery(n: int) -> Delivery:
    payload = {"state": "Trip", "severity": "High", "n": n, "text": "x" * 200}
    ts = "2026-04-22T08:00:12.120Z"
    return Delivery(
        source=SOURCES[n % len(SOURCES)],
        transition_id=str(n),
        boot_id="B17",
        source_timestamp=ts,
        arrival_at=ARRIVAL,
        payload=payload,
        payload_hash=payload_hash(payload, ts),
        raw="{}",
        receiver="bench",
    )


async def fill(store: Store, total: int) -> None:
    for start in range(0, total, 5000):
        await store.record([delivery(n) for n in range(start, min(total, start + 5000))])


async def drain(store: Store, up: Upstream, total: int) -> dict[str, float]:
    """Run the forwarder until `up` has nothing pending; events/s and RSS."""
    sink = build_sink(up, site=SITE, gateway=GW)
    fwd = Forwarder(store, sink, up, site=SITE, gateway=GW, idle_poll_s=0.05)
    stop = asyncio.Event()
    start_rss, peak = rss_mb(), rss_mb()
    t0 = time.perf_counter()
    task = asyncio.create_task(fwd.run(stop), name=f"forwarder[{up.name}]")
    while fwd.state.delivered < total:
        await asyncio.sleep(0.05)
        peak = max(peak, rss_mb())
        if task.done():
            raise RuntimeError(f"forwarder stopped early: {fwd.state}")
    elapsed = time.perf_counter() - t0
    stop.set()
    await task
    await sink.close()
    return {
        "events_per_s": round(total / elapsed),
        "seconds": round(elapsed, 2),
        "rss_start_mb": round(start_rss, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_growth_mb": round(peak - start_rss, 1),
    }


def same_events(total: int) -> list[Any]:
    """The same CloudEvents the forwarder sends (attempt 1), for the baselines."""
    out = []
    for n in range(total):
        d = delivery(n)
        rec = Transition(
            n + 1,
            d.source or "",
            d.transition_id or "",
            d.boot_id or "",
            d.source_timestamp,
            d.payload_json,
            ARRIVAL,
        )
        out.append(
            encode(
                Entry(n + 1, "transition", n + 1, 1, ARRIVAL, rec),
                site=SITE,
                gateway=GW,
                replayed=False,
                store_id=STORE_ID,
            )
        )
    return out


async def mqtt_baseline(events: list[Any], topic: str, window: int) -> float:
    client = aiomqtt.Client(
        "127.0.0.1",
        1883,
        identifier=f"bench-bare-{os.getpid()}",
        max_inflight_messages=window,
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )
    client.pending_calls_threshold = window + 10
    sem = asyncio.Semaphore(window)

    async def one(topic_: str, body: bytes) -> None:
        async with sem:
            await client.publish(topic_, body, qos=1)

    async with client:
        t0 = time.perf_counter()
        for start in range(0, len(events), 1000):
            chunk = events[start : start + 1000]
            await asyncio.gather(*(one(render_topic(topic, SITE, e), e.body) for e in chunk))
        return len(events) / (time.perf_counter() - t0)


async def http_baseline(events: list[Any], url: str, batch: int) -> float:
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        for start in range(0, len(events), batch):
            chunk = events[start : start + batch]
            headers = {"Content-Type": "application/cloudevents-batch+json", "Idempotency-Key": "x"}
            async with session.post(url, data=batch_body(chunk), headers=headers) as resp:
                resp.raise_for_status()
        return len(events) / (time.perf_counter() - t0)


async def start_receiver() -> tuple[asyncio.subprocess.Process, str]:
    """The recording HTTP receiver (a subprocess) and its URL."""
    receiver = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devices.upstream",
        "--no-keep",
        stdout=asyncio.subprocess.PIPE,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert receiver.stdout is not None
    url = json.loads((await receiver.stdout.readline()).decode().removeprefix("READY "))["url"]
    return receiver, url


async def agent_drains(ups: list[Upstream], total: int) -> dict[str, Any]:
    """Fill one store with `total` events, then drain it to each upstream in turn."""
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(Path(tmp) / "store.db")
        try:
            await store.register_upstreams([(up.name, "none") for up in ups], ARRIVAL)
            t0 = time.perf_counter()
            await fill(store, total)
            result["fill_s"] = round(time.perf_counter() - t0, 2)
            boots = 10
            for up in ups:
                result[up.name] = await drain(store, up, total + boots)
        finally:
            await store.close()
    return result


async def main(total: int, sinks: list[str]) -> dict[str, Any]:
    receiver, url = await start_receiver()
    topic = f"bench-{uuid.uuid4().hex[:8]}/events/{{device}}/{{channel}}"
    mq = MqttUpstream("mqtt", "mqtt://127.0.0.1:1883", topic=topic, max_inflight=100, read_size=1000)
    http = HttpUpstream("http", url)  # defaults: batches of 500, 4000 rows per read
    ups: list[Upstream] = [up for up in (mq, http) if up.name in sinks]
    result: dict[str, Any] = {"bench": "replay", "events": total}
    try:
        result.update(await agent_drains(ups, total))
        events = same_events(total)
        if "mqtt" in sinks:
            result["mqtt"]["bare_aiomqtt_per_s"] = round(await mqtt_baseline(events, topic, 100))
        if "http" in sinks:
            result["http"]["bare_aiohttp_per_s"] = round(await http_baseline(events, url, 500))
    finally:
        receiver.terminate()
        await receiver.wait()
    result["targets"] = targets(result)
    return result


def targets(result: dict[str, Any]) -> dict[str, bool]:
    """Each sink's ratio to its bare baseline, and the targets for the sinks that ran."""
    out: dict[str, bool] = {}
    for name, bare in (("mqtt", "bare_aiomqtt_per_s"), ("http", "bare_aiohttp_per_s")):
        if name in result:
            result[name]["ratio_vs_bare"] = round(result[name]["events_per_s"] / result[name][bare], 3)
    if "mqtt" in result:
        out["mqtt_ratio_ge_0.8"] = result["mqtt"]["ratio_vs_bare"] >= 0.8
    if "http" in result:
        out["http_ge_20000_per_s"] = result["http"]["events_per_s"] >= 20_000
    growth = [result[name]["rss_growth_mb"] for name in ("mqtt", "http") if name in result]
    out["rss_growth_lt_30mb"] = max(growth) < 30
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="10,000 events")
    ap.add_argument(
        "--sinks",
        nargs="+",
        choices=["mqtt", "http"],
        default=["mqtt", "http"],
        help="which drains to run (mqtt needs a broker on 127.0.0.1:1883)",
    )
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main(10_000 if args.quick else args.events, args.sinks))))

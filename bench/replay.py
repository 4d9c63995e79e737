"""Backlog drain benchmark: events/s from the outbox to Mosquitto and to an HTTP receiver.

Prints ONE JSON line; it drives the real store and forwarder and must not change them.

A backlog of N events (default 30,000) is recorded once (synchronous=FULL) into a template
store; every round drains a fresh copy of it with the real forwarder (claim, encode,
publish, settle) at the settings a user gets by default (MQTT: one event per message, QoS 1,
`read_size` 500, 100 in flight; HTTP: batches of 500, `read_size` 4000). Agent and baseline
rounds alternate (`--rounds`, default 3); the figures are medians. The baselines do the same
work minus the agent's overhead:

* MQTT: bare aiomqtt publishing the agent's own messages (same topics and bodies) at QoS 1,
  100 always in flight (100 workers over one iterator), no store;
* `mqtt_receipts`: the MQTT drain with `receipts: true` against the same bare aiomqtt loop: a
  drain ends when every row is confirmed by a receipt, not at its PUBACK. The receipts come from
  `bench/receipt_ledger.py` (a process of its own: it reads the events and answers a receipt
  every 50 ms, the ledger's gathering time, with no database), so what is measured is what
  receipts cost the gateway.

The MQTT drains and their baselines use a Mosquitto of the bench's own (a free port, set up as
docs/ledger-setup.md says for the ledger's broker: `max_queued_messages 0`, TCP_NODELAY) when
mosquitto is installed, else the machine's broker on 127.0.0.1:1883. With the stock queue limit
of 1,000 the machine's broker dropped about a quarter of the events on their way to the
receipts' stand-in whenever it fell behind (after PUBACKing them to the agent), and the drain
waited for the agent to send them again after `receipt_timeout` (60 s): receipts doing their
work, not their cost.
* HTTP: the agent's own POST bodies plus the least durable outbox work: read the batch's
  rows from a copy of the same store, one committed range UPDATE after each 2xx,
  synchronous=FULL. `bare_post_only_per_s` is the same POSTs with no store at all.

The whole process runs with the service's process-wide settings (`agent.service.runtime`: the
garbage collector's threshold), as `edge-agent run` does; the baselines run in the same process,
so they get them too.

The HTTP receiver is `bench/sink_receiver.py` (a subprocess that reads each body and answers
200 without parsing it), so the receiver is not the bottleneck of either side. Peak RSS of
this process is sampled from /proc during each drain, and `written_kib_per_event` is what the
agent's drain caused to be written to storage (`/proc/self/io` `write_bytes`: the settles, with
receipts their confirms, and the store's close), per event, median of the rounds;
`--agent-only` skips the baselines (for the memory check of a long drain).

    python bench/replay.py                       # 30,000 events, 3 rounds, both sinks
    python bench/replay.py --sinks http          # only the HTTP drain (no broker needed)
    python bench/replay.py --events 1000000 --sinks mqtt --rounds 1 --agent-only   # memory check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import aiomqtt

from agent.cli.ledger.throwaway import free_port, listening, mosquitto_binary
from agent.config.upstreams import HttpUpstream, MqttUpstream, Upstream
from agent.core.contract import Delivery
from agent.core.records import Entry, Transition
from agent.service.forwarder import Forwarder
from agent.service.process import written_bytes
from agent.service.runtime import tuned_process
from agent.service.upstream_sink import build_sink
from agent.sinks.encode import BATCH_CONTENT_TYPE, Event, batch_body, encode, render_topic
from agent.store.store import Store
from bench import backlog
from bench.backlog import ARRIVAL, copy_store, watch_drain
from bench.rounds import alternate_async, median, ratio, rss_mb, rss_peak_mb

SITE, GW = "bench", "gw-bench"
STORE_ID = "00000000-0000-4000-8000-000000000000"
SOURCES = [f"PUMP-{d:02d}/Trip" for d in range(10)]
BOOTS = len(SOURCES)  # one boot_observed row per device rides along in the outbox


def delivery(n: int) -> Delivery:
    return backlog.delivery(n, SOURCES[n % len(SOURCES)], "2026-04-22T08:00:12.120Z")


async def agent_drain(path: Path, up: Upstream, total: int) -> dict[str, float]:
    """Run the real forwarder on the store at `path` until `up` has nothing pending (with
    receipts: until every row is confirmed)."""
    store = await Store.open(path)
    sink = build_sink(up, site=SITE, gateway=GW)
    fwd = Forwarder(store, sink, up, site=SITE, gateway=GW, idle_poll_s=0.05)
    stop = asyncio.Event()
    start_rss = rss_mb()
    peak = start_rss
    written = write_bytes()
    t0 = time.perf_counter()
    task = asyncio.create_task(fwd.run(stop), name=f"forwarder[{up.name}]")
    try:
        keeper = fwd.receipts
        if keeper is not None:
            done = lambda: keeper.counts.confirmed >= total + BOOTS  # noqa: E731
        else:
            done = lambda: fwd.state.delivered >= total + BOOTS  # noqa: E731
        peak = await watch_drain(task, done, lambda: fwd.state, peak)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        await task
        await sink.close()
        await store.close()
    written = write_bytes() - written  # the settles (and receipts' confirms), the close's checkpoint
    return {"rate": total / elapsed, "rss_growth_mb": peak - start_rss, "write_kib": written / 1024 / total}


def write_bytes() -> int:
    """What this process has caused to be written to storage (`/proc/self/io`): flash wear."""
    return written_bytes() or 0


def same_events(total: int) -> list[Event]:
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
                Entry(n + 1, "transition", n + 1, 1, rec),
                site=SITE,
                gateway=GW,
                replayed=True,
                store_id=STORE_ID,
            )
        )
    return out


async def mqtt_bare(messages: list[tuple[str, bytes]], window: int, port: int = 1883) -> float:
    """aiomqtt QoS 1 publishes of `messages`, `window` always in flight; messages/s."""
    client = aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=f"bench-bare-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        max_inflight_messages=window,
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )
    client.pending_calls_threshold = window + 10
    async with client:
        it = iter(messages)

        async def worker() -> None:
            for topic, body in it:
                await client.publish(topic, body, qos=1)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return len(messages) / (time.perf_counter() - t0)


async def post(session: aiohttp.ClientSession, url: str, body: bytes, key: str) -> None:
    headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": key}
    async with session.post(url, data=body, headers=headers) as resp:
        resp.raise_for_status()
        await resp.read()


async def http_bare(
    path: Path | None, bodies: list[bytes], url: str, batch: int, read_size: int, upstream: str
) -> float:
    """The agent's POST bodies in order, plus (with a store `path`) per read of `read_size`
    rows: the rows read, and one committed range UPDATE after the 2xx of its POSTs."""
    con = None
    if path is not None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    per_read = read_size // batch
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        for start in range(0, len(bodies), per_read):
            if con is not None:
                rows = con.execute(
                    "SELECT o.outbox_id, e.payload FROM outbox o JOIN events e ON e.canonical_id = o.ref_id"
                    " WHERE o.upstream = ? AND o.state = 'pending' AND o.kind = 'transition'"
                    " ORDER BY o.outbox_id LIMIT ?",
                    (upstream, read_size),
                ).fetchall()
            for k, body in enumerate(bodies[start : start + per_read]):
                await post(session, url, body, f"bench-{start + k}")
            if con is not None and rows:
                con.execute("BEGIN IMMEDIATE")
                con.execute(
                    "UPDATE outbox SET state = 'delivered', sent_at = ? WHERE upstream = ?"
                    " AND state = 'pending' AND outbox_id BETWEEN ? AND ?",
                    (ARRIVAL, upstream, rows[0][0], rows[-1][0]),
                )
                con.execute("COMMIT")
        elapsed = time.perf_counter() - t0
    if con is not None:
        con.close()
    return len(bodies) * batch / elapsed


async def start_broker() -> tuple[asyncio.subprocess.Process, int]:
    """A Mosquitto of the bench's own on a free port, as the ledger's broker is set up (no queue limit)."""
    binary = mosquitto_binary()
    if binary is None:
        raise RuntimeError("the mqtt_receipts drain needs mosquitto (apt-get install mosquitto)")
    port = free_port()
    conf = Path(tempfile.mkdtemp(prefix="bench-mq-")) / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\nset_tcp_nodelay true\n"
    )
    proc = await asyncio.create_subprocess_exec(
        binary, "-c", str(conf), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    for _ in range(200):
        if listening(port):
            return proc, port
        await asyncio.sleep(0.05)
    raise RuntimeError("the bench's mosquitto did not start")


async def start_receipt_ledger(topic: str, port: int) -> asyncio.subprocess.Process:
    """The receipts' stand-in ledger (a subprocess), once it is subscribed to `topic`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve().parent / "receipt_ledger.py"),
        topic,
        str(port),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line.startswith(b"READY"):
        raise RuntimeError("bench/receipt_ledger.py did not start")
    return proc


async def start_receiver() -> tuple[asyncio.subprocess.Process, str]:
    """The least-work HTTP receiver (a subprocess) and its URL."""
    receiver = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve().parent / "sink_receiver.py"),
        stdout=asyncio.subprocess.PIPE,
    )
    assert receiver.stdout is not None
    url = json.loads((await receiver.stdout.readline()).decode().removeprefix("READY "))["url"]
    return receiver, url


async def main(total: int, sinks: list[str], rounds: int, agent_only: bool) -> dict[str, Any]:
    receiver, url = await start_receiver()
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}/events/{{device}}/{{channel}}"
    own = mosquitto_binary() is not None and any(s.startswith("mqtt") for s in sinks)
    broker, port = await start_broker() if own else (None, 1883)
    mq = MqttUpstream("mqtt", f"mqtt://127.0.0.1:{port}", topic=topic)  # the defaults
    mq_receipts = MqttUpstream("mqtt_receipts", f"mqtt://127.0.0.1:{port}", topic=topic, receipts=True)
    http = HttpUpstream("http", url)  # the defaults
    ups: list[Upstream] = [up for up in (mq, mq_receipts, http) if up.name in sinks]
    ledger = await start_receipt_ledger(f"{prefix}/events/#", port) if "mqtt_receipts" in sinks else None
    result_broker = "own" if broker is not None else "127.0.0.1:1883"
    result: dict[str, Any] = {"bench": "replay", "events": total, "rounds": rounds}
    if any(s.startswith("mqtt") for s in sinks):
        result["broker"] = result_broker
    try:
        with tempfile.TemporaryDirectory() as tmp:
            template = Path(tmp) / "template.db"
            result["fill_s"] = round(
                await backlog.make_template(template, [up.name for up in ups], total, delivery), 2
            )
            events = [] if agent_only else same_events(total)
            for up in ups:
                work = Path(tmp) / f"{up.name}.db"
                growth: list[float] = []

                written: list[float] = []

                async def agent(
                    up: Upstream = up,
                    work: Path = work,
                    growth: list[float] = growth,
                    kib: list[float] = written,
                ) -> float:
                    got = await agent_drain(copy_store(template, work), up, total)
                    growth.append(got["rss_growth_mb"])
                    kib.append(got["write_kib"])
                    return got["rate"]

                figures: dict[str, Any] = {"read_size": up.read_size, "batch_size": up.batch_size}
                if isinstance(up, MqttUpstream):
                    figures["max_inflight"] = up.max_inflight
                    msgs = [(render_topic(topic, SITE, e), e.body) for e in events]

                    async def base(
                        msgs: list[tuple[str, bytes]] = msgs, w: int = up.max_inflight, p: int = port
                    ) -> float:
                        return await mqtt_bare(msgs, w, p)

                    base_name = "bare_aiomqtt_per_s"
                else:
                    bodies = [
                        batch_body(events[i : i + up.batch_size])
                        for i in range(0, len(events), up.batch_size)
                    ]
                    base_path = Path(tmp) / "http-base.db"

                    async def base(
                        u: HttpUpstream = up, b: list[bytes] = bodies, p: Path = base_path
                    ) -> float:
                        return await http_bare(
                            copy_store(template, p), b, url, u.batch_size, u.read_size, u.name
                        )

                    base_name = "bare_least_outbox_per_s"
                if agent_only:
                    rates = [await agent() for _ in range(rounds)]
                    figures["events_per_s"] = round(median(rates))
                else:
                    rates, bare = await alternate_async(rounds, agent, base)
                    figures["events_per_s"] = round(median(rates))
                    figures[base_name] = round(median(bare))
                    figures["ratio_vs_bare"] = ratio(rates, bare)
                    if isinstance(up, HttpUpstream):
                        only = [await http_bare(None, bodies, url, up.batch_size, up.read_size, up.name)]
                        figures["bare_post_only_per_s"] = round(median(only))
                    figures["bare_rounds_per_s"] = [round(x) for x in bare]
                figures["agent_rounds_per_s"] = [round(x) for x in rates]
                figures["rss_growth_mb"] = round(max(growth), 1)
                figures["written_kib_per_event"] = round(median(written), 2)
                result[up.name] = figures
    finally:
        for proc in (receiver, ledger, broker):
            if proc is not None:
                proc.terminate()
                await proc.wait()
    result["rss_peak_mb"] = round(rss_peak_mb(), 1)
    for name in ("mqtt", "mqtt_receipts"):
        if name in result:
            rate = result[name]["events_per_s"]
            result[name]["minutes_for_10m_events"] = round(10_000_000 / rate / 60, 1)
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and baseline")
    ap.add_argument("--agent-only", action="store_true", help="no baselines (memory check)")
    ap.add_argument(
        "--sinks",
        nargs="+",
        choices=["mqtt", "mqtt_receipts", "http"],
        default=["mqtt", "mqtt_receipts", "http"],
        help="which drains to run (mqtt and mqtt_receipts need a broker on 127.0.0.1:1883)",
    )
    args = ap.parse_args()
    with tuned_process():  # as `edge-agent run` runs (the baselines too: same process)
        print(json.dumps(asyncio.run(main(args.events, args.sinks, args.rounds, args.agent_only))))

"""OPC UA subscription benchmark: transitions per second through the agent's subscribed OPC UA
source into committed rows, against a bare asyncua client counting the same notifications.

One simulator process (our ``devices/`` OPC UA server, in its own process so it does not
share an interpreter with the clients; or, with ``--server node-opcua``, a node-opcua server
with the same node layout, ``peers/node/``, since ours cannot make 5,000 transitions/s on a
2-core machine) serves one controller with one channel. On each burst it makes --transitions
transitions, --chunk at a time (each chunk: the transitions, then one write of the controller's
nodes and one TransitionEventType event per transition), as fast as it can or at --rate per
second. Then, alternated for --rounds rounds (default 3; figures are medians):

* agent: the OPC UA source exactly as a user configures it (``subscribe: true``, ``events``
  mapped, ``security: {policy: None}``, every other setting at its default), run by
  ``run_source`` into the real recorder and a real SQLite store (synchronous=FULL), until every
  transition of the burst is committed (counted from the recorder's commit hook);
* bare: one asyncua ``Client`` with the same subscription (data changes of the boot id and the
  transition counter, events of the controller's TransitionEventType with the same selected
  fields, same publishing interval and queue sizes) and a synchronous handler that only counts
  the burst's events.

``cpu_ms_per_1000`` is this process's CPU time (every thread, the store's included) over the
burst per 1,000 transitions taken: the simulator runs in another process, so it is not counted,
and this figure moves much less with the load of the machine than the rates do.

A side's rate is the transitions it took over the time from the burst command to the last one
taken (committed, or counted), so it includes how far behind the simulator that side ended
(``tail_ms``, from the simulator's last transition to the last one taken; longer bursts weigh
it less). ``lost`` is what was made and never taken; for the agent it is
read back from the store after the round (keys of the burst's range), and ``gap_ids`` says how
many of those the store's gap/overrun records name (a loss the agent recorded, never silent).
The server's own emission rate is the ceiling of both: when ``server_emit_per_s`` is close to
the bare rate, the server is the limit, and the ratio says how much of it the agent takes.

    python bench/opcua_subscribe.py                            # 20,000 transitions, 3 rounds
    python bench/opcua_subscribe.py --transitions 300 --rounds 1   # smoke
    npm install --prefix peers/node                            # once: node-opcua-server
    python bench/opcua_subscribe.py --server node-opcua --rate 5000

Without Node.js or the npm package, ``--server node-opcua`` prints one JSON line saying why
(``"skipped"``) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import loader as config  # noqa: E402
from agent.core.decide import Outcome  # noqa: E402
from agent.core.snapshot import Observations  # noqa: E402
from agent.service.recorder import Recorder  # noqa: E402
from agent.sources.base import run_source  # noqa: E402
from agent.sources.opcua.events import EVENT_SELECT  # noqa: E402
from agent.sources.opcua.poller import OpcUaSource  # noqa: E402
from agent.sources.opcua.session import EVENT_QUEUE_SIZE  # noqa: E402
from agent.sources.pollers import build_source  # noqa: E402
from agent.store.store import Store  # noqa: E402
from bench.rounds import alternate_async, median, proc_status_mb, rss_peak_mb  # noqa: E402
from devices.agent_config import device_config  # noqa: E402
from devices.controller import ChannelSpec, Controller  # noqa: E402
from devices.opcua_nodes import NodeLayout  # noqa: E402

logging.getLogger("asyncua").setLevel(logging.CRITICAL)

NAME, CHANNEL = "PLC-UA", "Trip"
SOURCE = f"{NAME}/{CHANNEL}"


def controller(ring: int) -> Controller:
    return Controller(NAME, [ChannelSpec(CHANNEL)], ring_capacity=ring)


# --- the simulator process -------------------------------------------------------------------


async def serve(ring: int) -> None:
    """``--serve``: READY line, then one ``burst N RATE CHUNK`` per stdin line, answered by DONE."""
    from devices.opcua_server import OpcUaSimServer

    ctrl = controller(ring)
    sim = OpcUaSimServer([ctrl])
    await sim.start()
    print("READY " + json.dumps({"endpoint": sim.endpoint}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        _, n_text, rate_text, chunk_text = line.split()
        n, rate, chunk = int(n_text), float(rate_text), min(int(chunk_text), ring)
        first = ctrl.channel(CHANNEL).transition_id + 1
        t0 = time.monotonic()
        made = 0
        while made < n:
            k = min(chunk, n - made)
            for _ in range(k):
                ctrl.transition(CHANNEL)
            await sim.sync()
            made += k
            if rate > 0:
                await asyncio.sleep(max(0.0, t0 + made / rate - time.monotonic()))
            else:
                await asyncio.sleep(0)  # let the server publish
        seconds = time.monotonic() - t0
        last = ctrl.channel(CHANNEL).transition_id
        print("DONE " + json.dumps({"first": first, "last": last, "seconds": seconds}), flush=True)
    await sim.stop()


NODE_DIR = ROOT / "peers" / "node"


def node_missing() -> str | None:
    """Why the node-opcua server cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (the node-opcua server needs Node.js)"
    if not (NODE_DIR / "node_modules" / "node-opcua-server").is_dir():
        return f"node-opcua-server is not installed: npm install --prefix {NODE_DIR.relative_to(ROOT)}"
    return None


class Simulator:
    """The simulator process (ours, or the node-opcua one), driven over its stdin/stdout."""

    def __init__(self, server: str, ring: int, tmp: Path) -> None:
        if server == "node-opcua":
            script = str(NODE_DIR / "opcua_server.js")
            args = ["node", script, NAME, str(ring), str(tmp / "pki")]
        else:
            args = [sys.executable, str(Path(__file__).resolve()), "--serve", "--ring", str(ring)]
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.endpoint = str(self._answer("READY")["endpoint"])
        self.made = 0  # transitions made so far: the next burst's ids follow

    def _answer(self, word: str) -> dict[str, Any]:
        """The next protocol line (``word {json}``); other lines (a library's notices) are skipped."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if line.startswith(word + " "):
                answer: dict[str, Any] = json.loads(line[len(word) + 1 :])
                return answer
            if not line or line.startswith("FAILED"):
                self.proc.kill()
                raise SystemExit(f"simulator failed: {line!r}")

    async def burst(self, n: int, rate: float, chunk: int) -> dict[str, Any]:
        """Start a burst; returns when the simulator made all of it (its ids and seconds)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"burst {n} {rate} {chunk}\n")
        self.proc.stdin.flush()
        done = await asyncio.to_thread(self._answer, "DONE")
        assert (done["first"], done["last"]) == (self.made + 1, self.made + n), done
        self.made += n
        return done

    def rss_peak_mb(self) -> float:
        return proc_status_mb("VmHWM", self.proc.pid)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# --- both sides ------------------------------------------------------------------------------


class Taken:
    """Transitions of the current burst taken by one side, and when the last one was."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last
        self.ids: set[int] = set()
        self.at = 0.0
        self.all = asyncio.Event()

    def take(self, tid: int) -> None:
        if self.first <= tid <= self.last and tid not in self.ids:
            self.ids.add(tid)
            self.at = time.monotonic()
            if len(self.ids) == self.last - self.first + 1:
                self.all.set()


async def until_taken(taken: Taken, burst: asyncio.Task[dict[str, Any]], settle: float) -> dict[str, Any]:
    """Wait for every transition of the burst, or for ``settle`` seconds without progress after
    the simulator finished; the simulator's answer."""
    done = await burst
    while not taken.all.is_set():
        before = len(taken.ids)
        try:
            await asyncio.wait_for(taken.all.wait(), settle)
        except TimeoutError:
            if len(taken.ids) == before:
                break
    return done


def device(tmp: Path, endpoint: str, ring: int) -> config.Device:
    """The device as a user configures it: the simulator's own snippet, subscriptions on."""
    ctrl = controller(ring)
    entry = device_config(
        ctrl,
        opcua={"endpoint": endpoint, "security": {"policy": "None"}, "subscribe": True},
        nodes=NodeLayout(ctrl),
    )
    doc = {"site": "bench", "gateway": "bench", "store": {"path": str(tmp / "unused.db")}, "devices": [entry]}
    path = tmp / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config.load(path).devices[0]


def from_store(db: Path, first: int, last: int) -> dict[str, int]:
    """Keys of the burst committed, and ids of the burst named by gap/overrun records."""
    with sqlite3.connect(db) as con:
        keys = con.execute(
            "SELECT count(*) FROM (SELECT transition_id FROM events WHERE source = ?"
            " UNION SELECT transition_id FROM event_keys WHERE source = ?)"
            " WHERE CAST(transition_id AS INTEGER) BETWEEN ? AND ?",
            (SOURCE, SOURCE, first, last),
        ).fetchone()[0]
        gaps = con.execute(
            "SELECT from_value, to_value FROM anomalies WHERE source = ? AND kind IN ('gap', 'overrun')",
            (SOURCE,),
        ).fetchall()
    named = 0
    for lo, hi in gaps:
        a, b = max(int(lo), first), min(int(hi), last)
        named += max(0, b - a + 1)
    con.close()
    return {"committed": int(keys), "gap_ids": named}


async def agent_round(
    sim: Simulator, dev: config.Device, db: Path, n: int, rate: float, chunk: int, settle: float
) -> dict[str, Any]:
    """The agent's OPC UA source, subscribed, through the recorder into a fresh store."""
    taken = Taken(sim.made + 1, sim.made + n)

    def on_commit(batch: Sequence[Observations], outcomes: Sequence[Outcome]) -> None:
        deliveries = [d for obs in batch for d in obs.deliveries]
        for d, oc in zip(deliveries, outcomes, strict=False):
            if oc.decision.value == "inserted" and d.source == SOURCE and d.transition_id is not None:
                taken.take(int(d.transition_id))

    store = await Store.open(db)
    recorder = Recorder(store, on_commit=on_commit)
    stop, stop_rec = asyncio.Event(), asyncio.Event()
    rec = asyncio.create_task(recorder.run(stop_rec))
    source = build_source(dev, dev.connections[0])
    assert isinstance(source, OpcUaSource) and source.conn.subscribe
    poller = asyncio.create_task(run_source(source, recorder, stop))
    while source.polls < 1:  # connected, subscribed, first read done
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    cpu0, t0 = time.process_time(), time.monotonic()
    done = await until_taken(taken, asyncio.create_task(sim.burst(n, rate, chunk)), settle)
    cpu = time.process_time() - cpu0
    stop.set()
    await poller
    stop_rec.set()
    await rec
    await store.close()
    got = from_store(db, taken.first, taken.last)
    return {
        **_rates(taken, t0, cpu, done),
        "committed_in_store": got["committed"],
        "lost": n - got["committed"],
        "gap_ids": got["gap_ids"],
        "recorder_batches": recorder.stats.batches,
    }


async def bare_round(
    sim: Simulator, n: int, rate: float, chunk: int, settle: float, publishing: float
) -> dict[str, Any]:
    """A bare asyncua client, the same subscription, a handler that only counts."""
    import asyncua
    from asyncua.common.events import get_filter_from_event_type

    Client: Any = asyncua.Client  # type: ignore[attr-defined]

    taken = Taken(sim.made + 1, sim.made + n)

    class Handler:
        def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
            pass

        def event_notification(self, event: Any) -> None:
            taken.take(int(event.TransitionId))

        def status_change_notification(self, status: Any) -> None:
            pass

    client = Client(sim.endpoint, timeout=2)
    client.session_timeout = 600_000
    await client.connect()
    try:
        ns = await client.get_namespace_index("urn:edge-agent:sim")
        lay = NodeLayout(controller(1), ns)
        sub = await client.create_subscription(publishing * 1000, Handler())
        watched = [client.get_node(lay.node("BootId")), client.get_node(lay.node(CHANNEL, "TransitionId"))]
        await sub.subscribe_data_change(watched, queuesize=100)
        etype = client.get_node(f"ns={ns};s=TransitionEventType")
        evfilter = await get_filter_from_event_type([etype])  # the same fields the agent selects
        evfilter.SelectClauses = [
            c for c in evfilter.SelectClauses if c.BrowsePath[-1:] and c.BrowsePath[0].Name in EVENT_SELECT
        ]
        await sub.subscribe_events(
            client.get_node(lay.node()), etype, evfilter=evfilter, queuesize=EVENT_QUEUE_SIZE
        )
        await asyncio.sleep(0.3)
        cpu0, t0 = time.process_time(), time.monotonic()
        done = await until_taken(taken, asyncio.create_task(sim.burst(n, rate, chunk)), settle)
        cpu = time.process_time() - cpu0
    finally:
        await client.disconnect()
    return {**_rates(taken, t0, cpu, done), "lost": n - len(taken.ids)}


def _rates(taken: Taken, t0: float, cpu: float, done: dict[str, Any]) -> dict[str, Any]:
    got = len(taken.ids)
    wall = (taken.at - t0) if got else float("nan")
    return {
        "taken": got,
        "per_s": round(got / wall, 1) if got else 0.0,
        "server_emit_per_s": round((done["last"] - done["first"] + 1) / done["seconds"], 1),
        "cpu_ms_per_1000": round(cpu / max(1, got) * 1e6, 1),
        # from the simulator's last transition to the last one taken (how far behind it ended)
        "tail_ms": round((wall - done["seconds"]) * 1000) if got else None,
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        sim = Simulator(a.server, a.ring, tmp)
        try:
            dev = device(tmp, sim.endpoint, a.ring)
            publishing = dev.connections[0].publishing  # type: ignore[union-attr]
            runs = iter(range(10_000))
            # One unmeasured burst first: the server's and both clients' code paths warm up.
            await bare_round(sim, min(a.transitions, 500), a.rate, a.chunk, a.settle, publishing)

            async def agent() -> dict[str, Any]:
                return await agent_round(
                    sim, dev, tmp / f"a{next(runs)}.db", a.transitions, a.rate, a.chunk, a.settle
                )

            async def bare() -> dict[str, Any]:
                return await bare_round(sim, a.transitions, a.rate, a.chunk, a.settle, publishing)

            ag, ba = await alternate_async(a.rounds, agent, bare)
            server_peak = sim.rss_peak_mb()
        finally:
            sim.close()
    agent_rate = median([r["per_s"] for r in ag])
    bare_rate = median([r["per_s"] for r in ba])
    return {
        "bench": "opcua_subscribe",
        "server": a.server,
        "transitions": a.transitions,
        "rounds": a.rounds,
        "rate_asked": a.rate or "max",
        "chunk": a.chunk,
        "ring": a.ring,
        "publishing_s": publishing,
        "agent_per_s": round(agent_rate, 1),
        "bare_per_s": round(bare_rate, 1),
        "ratio": round(agent_rate / bare_rate, 3) if bare_rate else None,
        "server_emit_per_s": round(median([r["server_emit_per_s"] for r in ag + ba]), 1),
        "agent_cpu_ms_per_1000": round(median([r["cpu_ms_per_1000"] for r in ag]), 1),
        "bare_cpu_ms_per_1000": round(median([r["cpu_ms_per_1000"] for r in ba]), 1),
        "agent_tail_ms": median([r["tail_ms"] for r in ag if r["tail_ms"] is not None] or [0]),
        "bare_tail_ms": median([r["tail_ms"] for r in ba if r["tail_ms"] is not None] or [0]),
        "agent_rounds_per_s": [r["per_s"] for r in ag],
        "bare_rounds_per_s": [r["per_s"] for r in ba],
        "agent_lost": sum(r["lost"] for r in ag),
        "agent_lost_named_by_gaps": sum(min(r["lost"], r["gap_ids"]) for r in ag),
        "bare_lost": sum(r["lost"] for r in ba),
        "rss_peak_mb": round(rss_peak_mb(), 1),
        "server_rss_peak_mb": round(server_peak, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--transitions", type=int, default=20_000, help="transitions per burst (per round and side)"
    )
    ap.add_argument(
        "--rate", type=float, default=0.0, help="transitions/s the simulator makes (0: as fast as it can)"
    )
    ap.add_argument("--chunk", type=int, default=16, help="transitions per write of the controller's nodes")
    ap.add_argument("--ring", type=int, default=64, help="the controller's ring capacity (>= chunk)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and bare client")
    ap.add_argument("--settle", type=float, default=6.0, help="seconds without progress that end a round")
    ap.add_argument(
        "--server",
        choices=("asyncua", "node-opcua"),
        default="asyncua",
        help="the simulator: ours (asyncua, devices/) or peers/node's node-opcua server (faster)",
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve(a.ring))
        return
    if a.server == "node-opcua" and (why := node_missing()) is not None:
        print(f"skipped: {why}", file=sys.stderr)
        print(json.dumps({"bench": "opcua_subscribe", "server": a.server, "skipped": why}))
        return
    print(json.dumps(asyncio.run(run(a))))


if __name__ == "__main__":
    main()

"""Poller benchmark: the agent's Modbus pollers against a bare pymodbus loop; prints one JSON line.

It measures the agent's own pollers and recorder and must not change agent code to do so:
polls are counted where the service counts them, in each connection's live state.

One simulator process serves --n Modbus controllers (plus --m OPC UA controllers in a second
one). Then, alternated for --rounds rounds (default 3; figures are medians):

* fleet, agent: the real pollers (one task per connection, transition tracking, the live
  state the service keeps per connection) at --hz and the real recorder into a real SQLite
  store (synchronous=FULL), for --seconds;
* fleet, bare, twice: one ``AsyncModbusTcpClient`` per controller doing the same reads (the
  blocks the agent's read plan asks for) at the same interval, nothing else, for --seconds:
  `aligned` (every client at the multiples of the interval: one wake-up for all, the issue 35
  target's baseline, `cpu_per_poll_ratio`) and at the agent's own phases (each connection's
  ticks at the same phase over it as the agent's, `cpu_per_poll_ratio_phases`); the three sides
  run in turn, the order turned each round;
* one connection, agent: one controller polled with an interval of 0.1 ms (as fast as it
  goes), recorder and store included; one connection, bare: the same reads back to back.

Figures: polls/s asked and done, ticks missed (1 - polls done / polls asked, per side), p99 of
the interval between one controller's consecutive polls, CPU per 1,000 polls (this process's
CPU time over the window divided by the polls; the simulators run in other processes, so
they are not counted), transition-to-commit latency p50/p99 of the agent, and peak RSS.
The whole process runs with the service's process-wide settings (`agent.service.runtime`, as
`edge-agent run` does), the bare loop in it too.
* OPC UA polled reads (`opcua_polled`, --opcua controllers, default 20, in a simulator of their
  own, --opcua-seconds): the agent's OPC UA pollers alone (recorder and store included) against
  a bare asyncua loop reading the same nodes, ticking aligned (the target's) and at the agent's
  phases, the three sides in turn (bench/poll_opcua.py).

Targets: <= 0.5 % ticks missed at 200 controllers x 10 Hz, CPU per poll <= 1.2 x bare (issue
27; 1.3 before), one connection >= 0.6 of bare; the same CPU ratio for OPC UA polled reads.

    python bench/poll.py                         # 200 controllers x 10 Hz, 20 s, 3 rounds
    python bench/poll.py --n 10 --m 2 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pymodbus.client import AsyncModbusTcpClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import loader as config  # noqa: E402
from agent.core.contract import Decision  # noqa: E402
from agent.core.decide import Outcome  # noqa: E402
from agent.core.live import ConnectionLive  # noqa: E402
from agent.core.snapshot import Observations  # noqa: E402
from agent.core.timestamps import parse_timestamp  # noqa: E402
from agent.service.recorder import Recorder  # noqa: E402
from agent.service.runtime import tuned_process  # noqa: E402
from agent.sources.base import run_source  # noqa: E402
from agent.sources.modbus.poller import ModbusSource  # noqa: E402
from agent.sources.pollers import build_source  # noqa: E402
from agent.sources.schedule import BOOK, SlotBook, due_in_s  # noqa: E402
from agent.store.store import Store  # noqa: E402
from bench.poll_figures import Window, compared, missed_pct  # noqa: E402
from bench.poll_opcua import bare_opcua  # noqa: E402
from bench.rounds import alternate_async, median, rss_peak_mb  # noqa: E402
from devices.agent_config import device_config  # noqa: E402
from devices.controller import ChannelSpec, Controller  # noqa: E402
from devices.modbus_map import RegisterMap  # noqa: E402
from devices.opcua_nodes import NodeLayout  # noqa: E402

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)


def start_sim(names: list[str], *, opcua: bool, rate: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    args = [sys.executable, "-m", "devices", "--quiet", "--channels", "Trip"]
    args += ["--random", str(rate)] if rate > 0 else []  # 0: nothing changes
    args += ["--controllers", *names]
    args += ["--no-modbus", "--opcua-port", "0"] if opcua else ["--no-opcua", "--modbus-port", "0"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, json.loads(line[len("READY ") :])


def device_entries(
    names: list[str], ready: dict[str, Any], *, opcua: bool, poll: str
) -> list[dict[str, Any]]:
    out = []
    for name in names:
        ctrl = Controller(name, [ChannelSpec("Trip")])  # the same map as the subprocess serves
        if opcua:
            entry = device_config(
                ctrl,
                opcua={"endpoint": ready["opcua"]["endpoint"], "security": {"policy": "None"}},
                nodes=NodeLayout(ctrl),
                poll=poll,
            )
        else:
            entry = device_config(
                ctrl, modbus=ready["modbus"][name], register_map=RegisterMap(ctrl), poll=poll
            )
        out.append(entry)
    return out


def load_devices(tmp: str, entries: list[dict[str, Any]], name: str) -> list[config.Device]:
    path = Path(tmp) / f"{name}.yaml"
    doc = {
        "site": "bench",
        "gateway": "bench",
        "store": {"path": str(Path(tmp) / "unused.db")},
        "devices": entries,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return list(config.load(path).devices)


class CountedLive(ConnectionLive):
    """The live state the service keeps per connection, marking each answered poll in `window`
    (one method call per poll, as the bare loop's own mark: no wrapper around the poll)."""

    def __init__(self, device: str, receiver: str, window: Window, key: str) -> None:
        super().__init__(device, receiver)
        self.window, self.key = window, key

    def polled(self, at_s: float, boot_id: str | None) -> None:
        super().polled(at_s, boot_id)
        self.window.mark(self.key)


def plan_of(device: config.Device) -> list[tuple[str, int, int]]:
    """The (table, start, count) blocks the agent reads on every poll of this Modbus device."""
    src = build_source(device, device.connections[0])
    src.release()  # its slot: the agent's own pollers deal the process's slots, not the bare loop
    assert isinstance(src, ModbusSource)
    return [(b.table, b.start, b.count) for b in src.plan.blocks]


async def bare(
    devices: Sequence[config.Device],
    ports: Sequence[int],
    seconds: float,
    *,
    paced: bool,
    warm_up: float,
    aligned: bool = False,
) -> dict[str, Any]:
    """One bare client per controller, the same reads; paced to the interval or back to back.

    Paced, each connection ticks at the agent's phase for it; `aligned`: all at the multiples
    of the interval (every client wakes on the same millisecond, one wake-up for all)."""
    window = Window()
    clients = [
        AsyncModbusTcpClient("127.0.0.1", port=p, timeout=1, retries=0, reconnect_delay=0) for p in ports
    ]
    await asyncio.gather(*(c.connect() for c in clients))
    end = time.monotonic() + warm_up + seconds
    book = SlotBook()  # the agent's slots (agent.sources.schedule), dealt as its pollers take them
    phases = {d.name: book.take(d.poll).phase for d in devices}

    async def one(dev: config.Device, client: AsyncModbusTcpClient) -> None:
        period = dev.poll
        # The agent's schedule: the slots its pollers take, dealt in the same (device) order.
        phase = 0.0 if aligned else phases[dev.name]
        reads = [
            (getattr(client, f"read_{'holding_registers' if t == 'holding' else t}"), s, n)
            for t, s, n in plan_of(dev)
        ]
        while time.monotonic() < end:
            ok = True
            for fn, start, count in reads:
                rr = await fn(start, count=count, device_id=1)
                ok = ok and not rr.isError()
            if ok:
                window.mark(dev.name)
            if paced:
                await asyncio.sleep(due_in_s(period, phase, time.monotonic()))

    tasks = [asyncio.create_task(one(d, c)) for d, c in zip(devices, clients, strict=True)]
    await asyncio.sleep(warm_up)
    window.open()
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall, n = time.process_time() - cpu0, time.monotonic() - wall0, window.polls()
    await asyncio.gather(*tasks)
    for c in clients:
        c.close()
    return {"polls": n, "wall": wall, "cpu": cpu, "interval_p99_ms": window.interval_p99_ms()}


async def agent(devices: Sequence[config.Device], seconds: float, db: Path, warm_up: float) -> dict[str, Any]:
    """The real pollers and recorder into a real store."""
    # (commit time, source time) of each new live transition; the latencies are worked out after
    # the run, so that the bench's own arithmetic is not counted as the agent's CPU.
    committed: list[tuple[float, str]] = []

    def on_commit(batch: Sequence[Observations], outcomes: Sequence[Outcome]) -> None:
        now = time.time()
        deliveries = [d for obs in batch for d in obs.deliveries]
        for d, oc in zip(deliveries, outcomes, strict=False):
            if oc.decision is Decision.INSERTED and d.live and d.source_timestamp:
                committed.append((now, d.source_timestamp))

    # The agent's slots are dealt from the process's book: anything the bench left in it (a source
    # built and not given back) would deal this side's connections onto other slots than a
    # service's.
    left = {d.poll: sum(BOOK.counts(d.poll)) for d in devices if sum(BOOK.counts(d.poll))}
    if left:
        raise SystemExit(f"bench bug: slots still taken before the agent's run: {left}")
    store = await Store.open(db)
    recorder = Recorder(store, on_commit=on_commit)
    stop, stop_rec = asyncio.Event(), asyncio.Event()
    window = Window()
    rec = asyncio.create_task(recorder.run(stop_rec))
    modbus: list[str] = []
    tasks = []
    sources: list[Any] = []
    for d in devices:
        for i, c in enumerate(d.connections):
            key = f"{d.name}#{i}"
            src = build_source(d, c)
            sources.append(src)
            if isinstance(src, ModbusSource):
                modbus.append(key)
            # Live state per connection, as the service keeps it for `status` and metrics.
            link = CountedLive(d.name, src.receiver, window, key)
            tasks.append(asyncio.create_task(run_source(src, recorder, stop, live=link)))
    await asyncio.sleep(warm_up)  # connect and first reads (whole ring) before measuring
    window.open()
    committed[:] = []
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    n, n_modbus = window.polls(), window.polls(modbus)
    stop.set()
    await asyncio.gather(*tasks)
    for src in sources:  # their slots, as the service's run_device gives them back
        src.release()
    stop_rec.set()
    await rec
    await store.close()
    latencies = sorted((at - parse_timestamp(ts, "ts").timestamp()) * 1000 for at, ts in committed)

    def pct(p: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1) if latencies else None

    return {
        "polls": n,
        "modbus_polls": n_modbus,
        "wall": wall,
        "cpu": cpu,
        "interval_p99_ms": window.interval_p99_ms(),
        "latency_ms_p50": pct(0.5),
        "latency_ms_p99": pct(0.99),
        "transitions_committed": len(latencies),
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    poll = f"{1000 / a.hz:g}ms"
    mb_names = [f"PLC-{i:03d}" for i in range(a.n)]
    ua_names = [f"OPC-{i:03d}" for i in range(a.m)]
    procs = []
    out: dict[str, Any] = {"bench": "poll", "hz": a.hz, "seconds": a.seconds, "rounds": a.rounds}
    try:
        mb_proc, mb_ready = start_sim(mb_names, opcua=False, rate=a.rate * a.n)
        procs.append(mb_proc)
        entries = device_entries(mb_names, mb_ready, opcua=False, poll=poll)
        ua_entries: list[dict[str, Any]] = []
        if a.m:
            ua_proc, ua_ready = start_sim(ua_names, opcua=True, rate=a.rate * a.m)
            procs.append(ua_proc)
            ua_entries = device_entries(ua_names, ua_ready, opcua=True, poll=poll)
        ports = [mb_ready["modbus"][x]["port"] for x in mb_names]
        with tempfile.TemporaryDirectory() as tmp:
            fleet = load_devices(tmp, entries + ua_entries, "fleet")
            fleet_modbus = fleet[: a.n]
            fast_entry = device_entries(mb_names[:1], mb_ready, opcua=False, poll="0.1ms")
            fast = load_devices(tmp, fast_entry, "fast")
            runs = iter(range(10_000))

            async def agent_fleet() -> dict[str, Any]:
                return await agent(fleet, a.seconds, Path(tmp) / f"f{next(runs)}.db", a.warm_up)

            async def bare_aligned() -> dict[str, Any]:
                return await bare(fleet_modbus, ports, a.seconds, paced=True, warm_up=a.warm_up, aligned=True)

            async def bare_phased() -> dict[str, Any]:
                return await bare(fleet_modbus, ports, a.seconds, paced=True, warm_up=a.warm_up)

            # Three sides, the order turned each round, so a slow spell falls on each in turn.
            ag, ba, bp = [], [], []
            sides = [(agent_fleet, ag), (bare_aligned, ba), (bare_phased, bp)]
            for r in range(a.rounds):
                for fn, into in sides[r % 3 :] + sides[: r % 3]:
                    into.append(await fn())
            one_s = min(a.seconds, 5.0)

            async def agent_one() -> dict[str, Any]:
                return await agent(fast, one_s, Path(tmp) / f"o{next(runs)}.db", a.warm_up)

            async def bare_one() -> dict[str, Any]:
                return await bare(fast, ports[:1], one_s, paced=False, warm_up=a.warm_up)

            ag1, ba1 = await alternate_async(a.rounds, agent_one, bare_one)
            if a.opcua:
                op_names = [f"UAP-{i:03d}" for i in range(a.opcua)]
                op_proc, op_ready = start_sim(op_names, opcua=True, rate=a.rate * a.opcua)
                procs.append(op_proc)
                polled = load_devices(tmp, device_entries(op_names, op_ready, opcua=True, poll=poll), "ua")
                op_s = min(a.seconds, a.opcua_seconds)

                async def agent_ua() -> dict[str, Any]:
                    return await agent(polled, op_s, Path(tmp) / f"u{next(runs)}.db", a.warm_up)

                async def bare_ua() -> dict[str, Any]:
                    return await bare_opcua(polled, op_s, warm_up=a.warm_up, window=Window(), aligned=True)

                async def bare_ua_phased() -> dict[str, Any]:
                    return await bare_opcua(polled, op_s, warm_up=a.warm_up, window=Window())

                ua_ag, ua_ba, ua_bp = [], [], []  # three sides in turn, the order turned each round
                ua_sides = [(agent_ua, ua_ag), (bare_ua, ua_ba), (bare_ua_phased, ua_bp)]
                for r in range(a.rounds):
                    for fn, into in ua_sides[r % 3 :] + ua_sides[: r % 3]:
                        into.append(await fn())
                out["opcua_polled"] = compared(ua_ag, ua_ba, a, phased=ua_bp)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)

    def med(rows: list[dict[str, Any]], key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return median(vals) if vals else None

    agent_rates = [r["modbus_polls"] / r["wall"] for r in ag]
    bare_rates = [r["polls"] / r["wall"] for r in ba]
    agent_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in ag]  # ms per 1,000 polls
    bare_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in ba]
    phased_cpu = [r["cpu"] / max(1, r["polls"]) * 1e6 for r in bp]
    out["fleet"] = {
        "n_modbus": a.n,
        "bare_schedule": "aligned (the target's); bare_phases_*: at the agent's phases",
        "m_opcua": a.m,
        "asked_polls_per_s": (a.n + a.m) * a.hz,
        "agent_polls_per_s": round(median([r["polls"] / r["wall"] for r in ag]), 1),
        "agent_modbus_polls_per_s": round(median(agent_rates), 1),
        "bare_polls_per_s": round(median(bare_rates), 1),
        "ratio": round(median(agent_rates) / median(bare_rates), 3),
        "agent_missed_pct": median([missed_pct(r["polls"], r["wall"], a.n + a.m, a.hz) for r in ag]),
        "bare_missed_pct": median([missed_pct(r["polls"], r["wall"], a.n, a.hz) for r in ba]),
        "agent_interval_p99_ms": med(ag, "interval_p99_ms"),
        "bare_interval_p99_ms": med(ba, "interval_p99_ms"),
        "agent_cpu_ms_per_1000_polls": round(median(agent_cpu), 1),
        "bare_cpu_ms_per_1000_polls": round(median(bare_cpu), 1),
        "cpu_per_poll_ratio": round(median(agent_cpu) / median(bare_cpu), 3),
        "bare_phases_cpu_ms_per_1000_polls": round(median(phased_cpu), 1),
        "cpu_per_poll_ratio_phases": round(median(agent_cpu) / median(phased_cpu), 3),
        "bare_phases_missed_pct": median([missed_pct(r["polls"], r["wall"], a.n, a.hz) for r in bp]),
        "agent_cpu_share": round(median([r["cpu"] / r["wall"] for r in ag]), 3),
        "latency_ms_p50": med(ag, "latency_ms_p50"),
        "latency_ms_p99": med(ag, "latency_ms_p99"),
        "transitions_committed": sum(r["transitions_committed"] for r in ag),
    }
    one_agent = [r["polls"] / r["wall"] for r in ag1]
    one_bare = [r["polls"] / r["wall"] for r in ba1]
    out["one_connection"] = {
        "agent_polls_per_s": round(median(one_agent), 1),
        "bare_polls_per_s": round(median(one_bare), 1),
        "ratio": round(median(one_agent) / median(one_bare), 3),
        "agent_cpu_ms_per_1000_polls": round(median([r["cpu"] / max(1, r["polls"]) * 1e6 for r in ag1]), 1),
        "bare_cpu_ms_per_1000_polls": round(median([r["cpu"] / max(1, r["polls"]) * 1e6 for r in ba1]), 1),
    }
    out["rss_peak_mb"] = round(rss_peak_mb(), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="Modbus controllers (one simulator process)")
    ap.add_argument("--m", type=int, default=0, help="OPC UA controllers (a second simulator process)")
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and bare loop")
    ap.add_argument(
        "--opcua",
        type=int,
        default=20,
        help="OPC UA controllers polled apart against a bare asyncua loop (0: none)",
    )
    ap.add_argument("--opcua-seconds", type=float, default=10.0, help="window of the OPC UA comparison")
    ap.add_argument("--rate", type=float, default=0.5, help="transitions per second per controller")
    ap.add_argument("--warm-up", type=float, default=1.5, help="seconds to connect and read before measuring")
    with tuned_process():  # as `edge-agent run` runs (both sides, same process)
        print(json.dumps(asyncio.run(run(ap.parse_args()))))


if __name__ == "__main__":
    main()

"""Poller benchmark: prints one JSON line.

It measures the agent's own pollers and recorder and must not change agent code to do so:
polls are counted by wrapping each source's ``poll``.

For each N in --n (default 10, 50, 200) simulated Modbus controllers (plus --m OPC UA
controllers) polled at --hz (10), in one run:

* baseline: a bare pymodbus loop (one client per server, one read of the same block per
  poll, nothing else) over the same servers, for --seconds;
* agent: the real pollers (one task per connection, transition tracking) and the real
  recorder into a real SQLite store in a temporary directory, for --seconds.

Figures: polls/s asked and achieved (agent and baseline) and their ratio, the agent's CPU
share (process CPU time / wall time; the simulators run in subprocesses, so they are not
counted) and transition-to-commit latency p50/p99 (commit time minus the transition's source
time, both from this machine's clock). Targets: ratio >= 0.7, and p99 under one
poll interval + 50 ms at N = 50.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pymodbus.client import AsyncModbusTcpClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import loader as config  # noqa: E402
from agent.core.contract import parse_timestamp  # noqa: E402
from agent.core.decide import Outcome  # noqa: E402
from agent.core.snapshot import Observations  # noqa: E402
from agent.service.recorder import Recorder  # noqa: E402
from agent.sources.base import Source, run_source  # noqa: E402
from agent.sources.pollers import build_source  # noqa: E402
from agent.store.store import Store  # noqa: E402
from devices.agent_config import device_config  # noqa: E402
from devices.controller import ChannelSpec, Controller  # noqa: E402
from devices.modbus_map import RegisterMap  # noqa: E402
from devices.opcua_nodes import NodeLayout  # noqa: E402

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)


def start_sim(names: list[str], *, opcua: bool, rate: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    args = [
        sys.executable,
        "-m",
        "devices",
        "--quiet",
        "--channels",
        "Trip",
        "--random",
        str(rate),
        "--controllers",
        *names,
    ]
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


async def baseline(ports: Sequence[int], hz: float, seconds: float, count: int) -> float:
    """A bare pymodbus read loop: the most a poller could do over the same servers."""
    done = 0
    period = 1.0 / hz
    end = time.monotonic() + seconds

    async def one(port: int) -> None:
        nonlocal done
        client = AsyncModbusTcpClient("127.0.0.1", port=port, timeout=1, retries=0, reconnect_delay=0)
        await client.connect()
        while time.monotonic() < end:
            rr = await client.read_holding_registers(0, count=count, device_id=1)
            if not rr.isError():
                done += 1
            await asyncio.sleep(period - (time.monotonic() % period))
        client.close()

    await asyncio.gather(*(one(p) for p in ports))
    return done / seconds


class PollCount:
    """Counts the polls that answered, by wrapping each source's ``poll`` (agent code unchanged)."""

    def __init__(self) -> None:
        self.answered = 0

    def counted(self, source: Source) -> Source:
        inner = source.poll

        async def poll() -> Observations:
            obs = await inner()
            self.answered += 1
            return obs

        source.poll = poll  # type: ignore[method-assign]
        return source


async def agent(devices: Sequence[config.Device], seconds: float, db: Path) -> dict[str, Any]:
    latencies: list[float] = []

    def on_commit(batch: Sequence[Observations], outcomes: Sequence[Outcome]) -> None:
        now = datetime.now(UTC)
        deliveries = [d for obs in batch for d in obs.deliveries]
        for d, oc in zip(deliveries, outcomes, strict=False):
            if oc.decision.value == "inserted" and d.live and d.source_timestamp:
                latencies.append((now - parse_timestamp(d.source_timestamp, "ts")).total_seconds() * 1000)

    store = await Store.open(db)
    recorder = Recorder(store, on_commit=on_commit)
    stop, stop_rec = asyncio.Event(), asyncio.Event()
    polls = PollCount()
    rec = asyncio.create_task(recorder.run(stop_rec))
    tasks = [
        asyncio.create_task(run_source(polls.counted(build_source(d, c)), recorder, stop))
        for d in devices
        for c in d.connections
    ]
    await asyncio.sleep(1.0)  # connect and first reads (whole ring) before measuring
    polls.answered, latencies[:] = 0, []
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall, n = time.process_time() - cpu0, time.monotonic() - wall0, polls.answered
    stop.set()
    await asyncio.gather(*tasks)
    stop_rec.set()
    await rec
    await store.close()
    latencies.sort()

    def pct(p: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1) if latencies else None

    return {
        "polls_per_s": round(n / wall, 1),
        "cpu_share": round(cpu / wall, 3),
        "latency_ms_p50": pct(0.5),
        "latency_ms_p99": pct(0.99),
        "transitions_committed": len(latencies),
    }


async def run_one(n: int, m: int, hz: float, seconds: float, rate_per_device: float) -> dict[str, Any]:
    poll = f"{1000 / hz:g}ms"
    mb_names = [f"PLC-{i:03d}" for i in range(n)]
    ua_names = [f"OPC-{i:03d}" for i in range(m)]
    procs = []
    try:
        mb_proc, mb_ready = start_sim(mb_names, opcua=False, rate=rate_per_device * n)
        procs.append(mb_proc)
        entries = device_entries(mb_names, mb_ready, opcua=False, poll=poll)
        if m:
            ua_proc, ua_ready = start_sim(ua_names, opcua=True, rate=rate_per_device * m)
            procs.append(ua_proc)
            entries += device_entries(ua_names, ua_ready, opcua=True, poll=poll)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            doc = {
                "site": "bench",
                "gateway": "bench",
                "store": {"path": str(Path(tmp) / "s.db")},
                "devices": entries,
            }
            path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            devices = config.load(path).devices
            block = 10 + 8  # boot id and one channel: the agent's one live read per poll
            base = await baseline([mb_ready["modbus"][x]["port"] for x in mb_names], hz, seconds, block)
            got = await agent(devices, seconds, Path(tmp) / "s.db")
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    modbus_share = n / (n + m) if n + m else 1
    agent_modbus = got["polls_per_s"] * modbus_share  # approximate: every connection polls at the same rate
    return {
        "n_modbus": n,
        "m_opcua": m,
        "poll_hz": hz,
        "asked_polls_per_s": (n + m) * hz,
        "agent_polls_per_s": got["polls_per_s"],
        "baseline_polls_per_s": round(base, 1),
        "ratio": round(agent_modbus / base, 3) if base else None,
        "agent_cpu_share": got["cpu_share"],
        "latency_ms_p50": got["latency_ms_p50"],
        "latency_ms_p99": got["latency_ms_p99"],
        "latency_target_ms": 1000 / hz + 50,
        "transitions_committed": got["transitions_committed"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 50, 200])
    ap.add_argument("--m", type=int, default=2, help="OPC UA controllers (one simulator server)")
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=0.5, help="transitions per second per controller")
    a = ap.parse_args()
    runs = [asyncio.run(run_one(n, a.m, a.hz, a.seconds, a.rate)) for n in a.n]
    print(json.dumps({"bench": "poll", "runs": runs}))


if __name__ == "__main__":
    main()

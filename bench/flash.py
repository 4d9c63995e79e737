"""Flash benchmark: what `edge-agent run` writes to storage per event, against a lean recorder.

Prints ONE JSON line. It runs the real agent as a process (`python -m agent run`) and must not
change agent code to measure it.

One simulator process (`python -m devices`) serves --plcs Modbus controllers (rings of 8)
making --rate random transitions a second between them; a Mosquitto of the bench's own (a free
port) is the one MQTT upstream (QoS 1, no receipts: the defaults a user gets). For each commit
interval of --intervals (`store.commit_interval`), alternated for --rounds rounds (figures are
medians):

* agent: a fresh store, the agent polling every controller each --poll (100 ms), with the
  config's defaults otherwise (`synchronous: FULL`); after --warm-up seconds, `write_bytes` of
  /proc/<pid>/io (what the process caused to be written to storage: WAL frames, checkpoints,
  the store's file growth) over --seconds, divided by the canonical events the store gained;
* lean: `bench/flash_lean.py`, a durable recorder written apart from the project's store code
  (WAL, synchronous=FULL, one table with a unique identity index, group commits the same
  interval apart, a sent-mark transaction after each), at the event rate the agent's round
  before it measured, in a process of its own, at SQLite's defaults (4 KiB pages: the issue's
  baseline, `ratio`) and again at the agent's page size and checkpoint bytes
  (`lean_same_pages`, `ratio_same_pages`: what the same lean design gets from small pages).

Figures per interval: KiB written per event, MB/s, GB a day (at the rate measured), and the
ratio agent / lean of bytes per event. --idle-seconds (default 30, 0 skips) adds one run with
nothing changing (a simulator at rate 0): the agent's bytes written per second at the
default interval.

The store and the lean recorder's file go in --dir (default /var/tmp): it must be on a real
disk, since tmpfs writes never reach the block layer and count nothing.

    python bench/flash.py                                    # 10 PLCs, 40/s, 50ms 250ms 1s, 3 rounds
    python bench/flash.py --intervals 50ms 5s --seconds 60
    python bench/flash.py --plcs 2 --rate 10 --seconds 3 --warm-up 2 --rounds 1 --intervals 50ms --idle-seconds 0
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.cli.ledger.throwaway import free_port, listening, mosquitto_binary  # noqa: E402
from agent.config.units import parse_duration  # noqa: E402
from agent.service.process import written_bytes  # noqa: E402
from agent.store.connection import PAGE_SIZE  # noqa: E402
from bench.poll import start_sim  # noqa: E402
from bench.rounds import median  # noqa: E402
from devices.agent_config import device_config  # noqa: E402
from devices.controller import ChannelSpec, Controller  # noqa: E402
from devices.modbus_map import RegisterMap  # noqa: E402

DAY = 86400


def write_bytes(pid: int) -> int:
    got = written_bytes(pid)
    if got is None:
        raise RuntimeError(f"no write_bytes in /proc/{pid}/io")
    return got


def start_simulator(names: list[str], rate: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """One simulator process serving `names` over Modbus TCP, `rate` random transitions a second."""
    return start_sim(names, opcua=False, rate=rate)


def start_broker(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = mosquitto_binary()
    if binary is None:
        raise SystemExit("bench/flash.py needs mosquitto (apt-get install mosquitto)")
    port = free_port()
    conf = work / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if listening(port):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the bench's mosquitto did not start")


def write_config(
    work: Path, names: list[str], ready: dict[str, Any], port: int, poll: str, interval: str | None
) -> Path:
    devices = [
        device_config(c, modbus=ready["modbus"][c.name], register_map=RegisterMap(c), poll=poll)
        for c in (Controller(n, [ChannelSpec("Trip")]) for n in names)
    ]
    store: dict[str, Any] = {"path": str(work / "events.db")}
    if interval is not None:
        store["commit_interval"] = interval
    doc = {
        "site": "bench",
        "gateway": "gw-flash",
        "store": store,
        "upstreams": [
            {
                "name": "central",
                "mqtt": {"url": f"mqtt://127.0.0.1:{port}", "topic": "{site}/events/{device}/{channel}"},
            }
        ],
        "devices": devices,
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def events_in(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return int(con.execute("SELECT count(*) FROM events").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def agent_round(
    base: Path,
    names: list[str],
    ready: dict[str, Any],
    port: int,
    a: argparse.Namespace,
    interval: str | None,
) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="flash-agent-", dir=base))
    config = write_config(work, names, ready, port, a.poll, interval)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "-c", str(config), "--log-level", "warning"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(a.warm_up)
        if proc.poll() is not None:
            raise SystemExit(f"the agent stopped: {proc.stderr.read() if proc.stderr else ''}")
        b0, e0, t0 = write_bytes(proc.pid), events_in(work / "events.db"), time.monotonic()
        time.sleep(a.seconds)
        b1, e1, t1 = write_bytes(proc.pid), events_in(work / "events.db"), time.monotonic()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    seconds = t1 - t0
    return {"written_bytes": b1 - b0, "events": e1 - e0, "seconds": seconds}


def lean_round(
    base: Path, rate: float, interval_s: float, a: argparse.Namespace, page_size: int | None = None
) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="flash-lean-", dir=base))
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "flash_lean.py"), "--db", str(work / "lean.db")]
        + ["--rate", str(rate), "--interval", str(interval_s), "--seconds", str(a.seconds)]
        + ["--warm-up", str(min(a.warm_up, 5.0))]
        + (["--page-size", str(page_size)] if page_size else []),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return {"written_bytes": got["written_bytes"], "events": got["events"], "seconds": got["seconds"]}


def per_event_ratio(mine: dict[str, float | None], lean: dict[str, float | None]) -> float | None:
    a, b = mine["kib_per_event"], lean["kib_per_event"]
    return round(a / b, 3) if a and b else None


def figures(rounds: list[dict[str, float]]) -> dict[str, float | None]:
    per_event = [r["written_bytes"] / r["events"] for r in rounds if r["events"]]
    per_s = [r["written_bytes"] / r["seconds"] for r in rounds]
    rate = [r["events"] / r["seconds"] for r in rounds]
    bps = median(per_s)
    return {
        "kib_per_event": round(median(per_event) / 1024, 2) if per_event else None,
        "events_per_s": round(median(rate), 1),
        "mb_per_s": round(bps / 1e6, 3),
        "gb_per_day": round(bps * DAY / 1e9, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plcs", type=int, default=10)
    p.add_argument("--rate", type=float, default=40.0, help="random transitions per second over all PLCs")
    p.add_argument("--poll", default="100ms")
    p.add_argument("--intervals", nargs="*", default=["50ms", "250ms", "1s"])
    p.add_argument("--seconds", type=float, default=30.0, help="measured window per round")
    p.add_argument("--warm-up", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle-seconds", type=float, default=30.0)
    p.add_argument("--dir", default="/var/tmp", help="where the stores go (a real disk, not tmpfs)")
    p.add_argument("--agent-only", action="store_true", help="no lean rounds (for a sweep of rates)")
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="flash-", dir=a.dir))
    names = [f"PLC-{i:02d}" for i in range(a.plcs)]
    broker, port = start_broker(base)
    result: dict[str, Any] = {
        "bench": "flash",
        "plcs": a.plcs,
        "rate": a.rate,
        "poll": a.poll,
        "rounds": a.rounds,
    }
    try:
        sim, ready = start_simulator(names, a.rate)
        try:
            for interval in a.intervals:
                seconds = parse_duration(interval)
                agent_rounds: list[dict[str, float]] = []
                lean_rounds: list[dict[str, float]] = []
                same_rounds: list[dict[str, float]] = []
                for _ in range(a.rounds):
                    # The lean rounds need the agent's rate, so they follow an agent round.
                    agent_rounds.append(agent_round(base, names, ready, port, a, interval))
                    got = agent_rounds[-1]
                    rate = max(got["events"] / got["seconds"], 1.0)
                    if not a.agent_only:
                        lean_rounds.append(lean_round(base, rate, seconds, a))
                        same_rounds.append(lean_round(base, rate, seconds, a, PAGE_SIZE))
                mine = figures(agent_rounds)
                if a.agent_only:
                    result[interval] = {"agent": mine}
                    continue
                lean, same = figures(lean_rounds), figures(same_rounds)
                result[interval] = {
                    "agent": mine,
                    "lean": lean,
                    "ratio": per_event_ratio(mine, lean),
                    "lean_same_pages": same,
                    "ratio_same_pages": per_event_ratio(mine, same),
                }
        finally:
            sim.terminate()
            sim.wait(timeout=30)
        if a.idle_seconds > 0:
            sim, ready = start_simulator(names, 0.0)
            try:
                idle = a.idle_seconds
                quiet = argparse.Namespace(**{**vars(a), "seconds": idle})
                got = agent_round(base, names, ready, port, quiet, None)
                result["idle_bytes_per_s"] = round(got["written_bytes"] / got["seconds"], 1)
            finally:
                sim.terminate()
                sim.wait(timeout=30)
    finally:
        broker.terminate()
        broker.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

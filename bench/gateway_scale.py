"""A gateway at scale: `edge-agent run` polling 1,000 Modbus PLCs at 1 Hz and 200 at 10 Hz; one JSON line.

The agent runs as the service runs (`python -m agent run`, a real store, no upstream), started with
a soft limit of 1,024 open files as systemd gives a service (the agent raises it itself:
`agent.service.runtime`). One simulator process serves every PLC (`python -m devices`), static
values unless --rate. Alternated for --rounds rounds (figures are medians), two sides:

* fleet: --slow PLCs at 1 Hz and --fast PLCs at 10 Hz;
* baseline: the --fast PLCs alone, the same agent: what the thousand slow ones add (RSS per added
  PLC, CPU).

Per side: start-up (the process started -> every PLC read once: its boot observed and committed,
counted in the store every 0.1 s), then a window of
--seconds: polls asked and done (ticks missed, from the status' per-connection poll counts at the
window's two ends), CPU per 1,000 polls (/proc/PID/stat), RSS at the end and its peak; then
SIGTERM: how long the stop took against the stop budget (`StopBudget.hard_stop_s`).

Targets (issue 35): ticks missed <= 0.5 %, RSS <= 120 MB, start-up < 10 s, a stop under the budget.

    python bench/gateway_scale.py                        # 1,000 x 1 Hz + 200 x 10 Hz, 30 s, 3 rounds
    python bench/gateway_scale.py --slow 20 --fast 5 --seconds 4 --rounds 1     # the CI smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
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

from agent.core.timestamps import parse_timestamp  # noqa: E402
from agent.service.shutdown import STOP_BUDGET  # noqa: E402
from bench.poll import start_sim  # noqa: E402
from bench.rounds import median  # noqa: E402
from devices.agent_config import device_config  # noqa: E402
from devices.controller import ChannelSpec, Controller  # noqa: E402
from devices.modbus_map import RegisterMap  # noqa: E402

SYSTEMD_SOFT_NOFILE = 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def write_config(tmp: Path, name: str, plcs: list[tuple[str, str]], ready: dict[str, Any]) -> Path:
    """config.yaml for `plcs` ((name, poll) pairs) over the simulator's endpoints; its own store."""
    devices = []
    for plc, poll in plcs:
        ctrl = Controller(plc, [ChannelSpec("Trip")])  # the map the simulator serves
        devices.append(
            device_config(ctrl, modbus=ready["modbus"][plc], register_map=RegisterMap(ctrl), poll=poll)
        )
    doc = {"site": "bench", "gateway": name, "store": {"path": str(tmp / f"{name}.db")}, "devices": devices}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def status(config: Path) -> dict[str, Any] | None:
    out = subprocess.run(
        [sys.executable, "-m", "agent", "status", "-c", str(config), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        return None
    svc = json.loads(out.stdout).get("service")
    return svc if isinstance(svc, dict) else None


def boots(db: Path) -> int:
    """The boots the store holds (one per PLC after its first read), read-only; 0 before the store."""
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            return int(con.execute("SELECT count(*) FROM boots").fetchone()[0])
    except sqlite3.Error:
        return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def polls(svc: dict[str, Any]) -> dict[str, int]:
    return {c["device"]: int(c["polls"]) for c in svc.get("connections", [])}


def systemd_like_limits() -> None:
    """In the agent's process before exec: the soft open-files limit systemd gives a service."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SYSTEMD_SOFT_NOFILE, hard), hard))


def side(config: Path, plcs: list[tuple[str, str]], seconds: float, log: Path, sim: int) -> dict[str, Any]:
    """One run of the agent on `config`: start-up, a window of `seconds`, the stop."""
    hz = {name: 1000.0 / float(poll.removesuffix("ms")) for name, poll in plcs}
    t0 = time.monotonic()
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "-c", str(config), "--log-level", "WARNING"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        preexec_fn=systemd_like_limits,
    )
    db = Path(str(config).replace(".yaml", ".db"))
    try:
        while boots(db) < len(plcs):  # every PLC read once: its boot observed and committed
            if agent.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"the agent did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        startup = time.monotonic() - t0
        time.sleep(2.5)  # a fresh state at the window's start
        first, cpu0, sim0 = status(config), cpu_s(agent.pid), cpu_s(sim)
        time.sleep(seconds)
        last, cpu1, sim1 = status(config), cpu_s(agent.pid), cpu_s(sim)
        rss, peak = rss_mb(agent.pid, "VmRSS"), rss_mb(agent.pid, "VmHWM")
    finally:
        t_stop = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(120)
        stop_s = time.monotonic() - t_stop
    assert first is not None and last is not None
    at = [parse_timestamp(s["updated_at"], "updated_at").timestamp() for s in (first, last)]
    window = at[1] - at[0]  # between the two states' own times
    a, b = polls(first), polls(last)
    done = sum(b[n] - a.get(n, 0) for n in b)
    asked = sum(hz[n] * window for n in b)
    return {
        "startup_s": round(startup, 2),
        "window_s": round(window, 2),
        "polls": done,
        "asked": round(asked),
        "missed_pct": round(max(0.0, 100 * (1 - done / asked)), 3),
        "cpu_ms_per_1000_polls": round((cpu1 - cpu0) / max(1, done) * 1e6, 1),
        "cpu_share": round((cpu1 - cpu0) / seconds, 3),
        "simulator_cpu_share": round((sim1 - sim0) / seconds, 3),  # one core is 1.0: is it the limit?
        "rss_mb": round(rss, 1),
        "rss_peak_mb": round(peak, 1),
        "stop_s": round(stop_s, 2),
        "exit": code,
    }


def run(a: argparse.Namespace) -> dict[str, Any]:
    slow = [(f"S{i:04d}", "1000ms") for i in range(a.slow)]
    fast = [(f"F{i:04d}", "100ms") for i in range(a.fast)]
    sim, ready = start_sim([n for n, _ in slow + fast], opcua=False, rate=a.rate)
    fleet: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for r in range(a.rounds):  # alternated, the order turned each round
                pair = [("fleet", slow + fast, fleet), ("base", fast, base)]
                for name, plcs, into in pair if r % 2 == 0 else pair[::-1]:
                    config = write_config(tmp, f"{name}{r}", plcs, ready)
                    into.append(side(config, plcs, a.seconds, tmp / "agent.log", sim.pid))
    finally:
        sim.terminate()
        sim.wait(30)

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return round(median([r[key] for r in rows]), 3)

    keys = (
        "startup_s",
        "missed_pct",
        "cpu_ms_per_1000_polls",
        "cpu_share",
        "simulator_cpu_share",
        "rss_mb",
        "rss_peak_mb",
        "stop_s",
    )
    out: dict[str, Any] = {"bench": "gateway_scale", "slow_1hz": a.slow, "fast_10hz": a.fast}
    out["seconds"], out["rounds"] = a.seconds, a.rounds
    out["fleet"] = {k: med(fleet, k) for k in keys}
    out["base"] = {k: med(base, k) for k in keys}
    out["fleet"]["polls_per_s"] = round(median([r["polls"] / r["window_s"] for r in fleet]), 1)
    out["base"]["polls_per_s"] = round(median([r["polls"] / r["window_s"] for r in base]), 1)
    added = max(1, a.slow)
    out["rss_kb_per_added_plc"] = round((out["fleet"]["rss_mb"] - out["base"]["rss_mb"]) * 1024 / added, 1)
    out["stop_budget_s"] = STOP_BUDGET.hard_stop_s
    out["exits"] = sorted({r["exit"] for r in fleet + base})
    out["targets"] = {
        "missed_pct_le_0.5": out["fleet"]["missed_pct"] <= 0.5,
        "rss_le_120mb": out["fleet"]["rss_peak_mb"] <= 120,
        "startup_lt_10s": out["fleet"]["startup_s"] < 10,
        "stop_within_budget": out["fleet"]["stop_s"] <= STOP_BUDGET.hard_stop_s,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow", type=int, default=1000, help="PLCs polled at 1 Hz")
    ap.add_argument("--fast", type=int, default=200, help="PLCs polled at 10 Hz")
    ap.add_argument("--seconds", type=float, default=30.0, help="the measured window per side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.0, help="transitions per second over all PLCs")
    print(json.dumps(run(ap.parse_args())))


if __name__ == "__main__":
    main()

"""The real agent process and the fault campaigns shared by `tests/faults/` and `bench/faults.py`.

`AgentProcess` runs `python -m agent run -c FILE` (optionally under a prefix such as
`faketime`), waits for its "started" log line, and kills it (-9) or stops it (SIGTERM). The
campaigns drive a real `devices.plant.Plant` (Modbus simulators in this process), the real
recording HTTP receiver (`devices.upstream.Receiver`) and a real SQLite file, and end with the
one checker (`checker.check`). Loaded by file path (no package), like `checker.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant
from devices.upstream import Receiver

ROOT = Path(__file__).resolve().parents[2]
SITE = "plant-1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
UNIT = ROOT / "systemd" / "edge-agent.service"


def _timeout_stop_s() -> float:
    """TimeoutStopSec= of the unit, in seconds (the unit writes it as plain seconds)."""
    found = re.search(r"^TimeoutStopSec=(\d+)s?$", UNIT.read_text(), re.MULTILINE)
    assert found, f"no TimeoutStopSec=<seconds> in {UNIT}"
    return float(found[1])


STOP_TIMEOUT_S = _timeout_stop_s()
DRAIN_CUT = "not acknowledged stay pending"  # the forwarder's log line when the drain bound cuts a send
_here = Path(__file__).resolve().parent
if str(_here) not in sys.path:  # checker.py is a sibling file, not a package module
    sys.path.insert(0, str(_here))
import checker  # noqa: E402


def controllers(
    n: int, *, ring: int = 10, channels: Sequence[str] = ("Trip", "OverTemp")
) -> list[Controller]:
    return [
        Controller(f"PLC-{i:02d}", [ChannelSpec(c) for c in channels], ring_capacity=ring) for i in range(n)
    ]


def write_config(
    path: Path,
    *,
    store: Path,
    devices: list[dict[str, Any]],
    upstreams: list[dict[str, Any]],
    poll: str = "100ms",
    max_size: str | None = None,
    device_backoff: tuple[str, str] = ("100ms", "1s"),
    reserve: str | None = None,
) -> Path:
    doc: dict[str, Any] = {
        "site": SITE,
        "gateway": "gw-faults",
        "store": {
            "path": str(store),
            **({"max_size": max_size} if max_size else {}),
            **({"reserve": reserve} if reserve else {}),
        },
        "upstreams": upstreams,
        "devices": devices,
    }
    for dev in doc["devices"]:
        dev["poll"] = poll
        dev["backoff"] = {"initial": device_backoff[0], "max": device_backoff[1]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def http_upstream(url: str, *, batch_size: int = 100) -> dict[str, Any]:
    return {
        "name": "historian",
        "http": {"url": url, "batch_size": batch_size, "backoff": {"initial": "50ms", "max": "500ms"}},
    }


def mqtt_upstream(port: int) -> dict[str, Any]:
    return {
        "name": "central",
        "mqtt": {
            "url": f"mqtt://127.0.0.1:{port}",
            "connect_timeout": "2s",
            "ack_timeout": "2s",
            "backoff": {"initial": "50ms", "max": "500ms"},
            "max_inflight": 100,
        },
    }


class AgentProcess:
    """One `edge-agent run` process at a time for one config; its stderr goes to `log`."""

    def __init__(
        self, config: Path, log: Path, *, prefix: Sequence[str] = (), env: dict[str, str] | None = None
    ):
        self.config, self.log, self.prefix = config, log, list(prefix)
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._offset = 0

    async def start(self) -> None:
        assert self.proc is None or self.proc.returncode is not None, "already running"
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *self.prefix, sys.executable, "-m", "agent", "run", "-c", str(self.config),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err, env=self.env,
            )  # fmt: skip
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def this_run(self) -> str:
        """The log lines written since the last start."""
        with self.log.open("rb") as f:
            f.seek(self._offset)
            return f.read().decode(errors="replace")

    async def wait_for_log(self, text: str, timeout: float = 20.0) -> float:
        """Seconds until `text` appears in this run's log; fails if the process exits first."""
        t0 = time.monotonic()
        while text not in self.this_run():
            if self.proc is not None and self.proc.returncode is not None:
                raise AssertionError(
                    f"agent exited {self.proc.returncode} before {text!r}:\n{self.this_run()}"
                )
            if time.monotonic() - t0 > timeout:
                raise AssertionError(
                    f"{text!r} not in the agent's log after {timeout}s:\n{self.this_run()[-3000:]}"
                )
            await asyncio.sleep(0.02)
        return time.monotonic() - t0

    async def started(self, timeout: float = 20.0) -> float:
        return await self.wait_for_log("started devices=", timeout)

    async def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds to exit). Killed (-9) and failed if it overruns `timeout`."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            await self.kill9()
            raise AssertionError(
                f"agent did not exit within {timeout}s of SIGTERM:\n{self.this_run()[-3000:]}"
            ) from None
        return rc, time.monotonic() - t0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def cpu_s(self) -> float:
        """User + system CPU seconds of the agent process so far (/proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    async def status(self) -> dict[str, Any]:
        """`edge-agent status --json -c FILE`, as an operator would run it next to the service."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "status", "--json", "-c", str(self.config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"status exited {proc.returncode}: {err.decode()}"
        doc: dict[str, Any] = json.loads(out)
        return doc

    async def close(self) -> None:
        if self.alive():
            await self.kill9()


async def eventually(check: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


@dataclass
class Load:
    """Random transitions on a plant, recording every key it made."""

    plant: Plant
    made: set[checker.Key] = field(default_factory=set)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def start(self, rate: float, seed: int) -> None:
        self.stop.clear()
        self.task = asyncio.create_task(self._run(rate, seed), name="load")

    async def _run(self, rate: float, seed: int) -> None:
        rng = random.Random(seed)
        targets = [(c, ch.name) for c in self.plant.controllers.values() for ch in c.channels]
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), rng.expovariate(rate))
                break
            ctrl, channel = rng.choice(targets)
            await self.transition(ctrl.name, channel)

    async def transition(self, device: str, channel: str) -> None:
        entry = await self.plant.transition(device, channel)
        self.made.add((f"{device}/{channel}", str(entry.transition_id), str(entry.boot_id)))

    async def halt(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task
            self.task = None


@contextlib.asynccontextmanager
async def rig(
    work: Path, *, devices: int = 4, poll: str = "100ms", batch_size: int = 100, max_size: str | None = None,
    store: Path | None = None, ring: int = 10, reserve: str | None = None,
) -> AsyncIterator[tuple[Plant, Receiver, AgentProcess, Load]]:  # fmt: skip
    """A Modbus plant, a recording HTTP receiver, an agent configured for both (not started)."""
    async with Plant(controllers(devices, ring=ring), opcua_port=None) as plant, Receiver(keep=True) as rx:
        cfg = write_config(
            work / "config.yaml",
            store=store or work / "events.db",
            devices=plant.device_configs(),
            upstreams=[http_upstream(rx.url, batch_size=batch_size)],
            poll=poll,
            max_size=max_size,
            reserve=reserve,
        )
        agent = AgentProcess(cfg, work / "agent.log")
        try:
            yield plant, rx, agent, Load(plant)
        finally:
            await agent.close()


async def drain_and_check(
    agent: AgentProcess, rx: Receiver, db: Path, load: Load, tracker: checker.Tracker | None = None,
    timeout: float = 60.0, gaps_accounted: bool = False,
) -> checker.Verdict:  # fmt: skip
    """With the load stopped: run the agent until every made key is stored (or, with
    `gaps_accounted`, inside a gap or overrun record of its source and boot) and every stored key
    is upstream, stop it."""
    if not agent.alive():
        await agent.start()
        await agent.started()

    def settled() -> bool:
        keys = set(checker.committed_keys(db))
        missing = load.made - keys
        if gaps_accounted and missing:
            gaps = checker.gap_ranges(db)
            missing = {k for k in missing if not checker.in_gap(k, gaps)}
        return not missing and {checker.cloud_id(SITE, k) for k in keys} <= rx.distinct

    with contextlib.suppress(AssertionError):  # the checker below says what is missing
        await eventually(settled, timeout, "all made events stored and upstream")
    rc, _ = await agent.stop()
    assert rc == 0, agent.this_run()[-3000:]
    return checker.check(
        db, site=SITE, upstream_events=rx.events, tracker=tracker, made=load.made, log=agent.log,
        gaps_accounted=gaps_accounted,
    )  # fmt: skip


def overruns(db: Path) -> int:
    """Ring overruns the agent recorded: events the controllers dropped before they were read."""
    con = checker.connect_ro(db)
    try:
        return int(con.execute("SELECT count(*) FROM anomalies WHERE kind = 'overrun'").fetchone()[0])
    finally:
        con.close()


async def kill_campaign(work: Path, *, kills: int, seed: int, rate: float = 6.0) -> dict[str, Any]:
    """`kills` x (start the agent, let it poll, record and forward for a random time, kill -9).

    One kill in five lands during start-up (store open, migrations, first connects); the rest
    at a uniform random point of up to 1.2 s after the "started" line, while transitions come in
    at `rate` per second and the forwarder drains. After each kill the store is read (every key
    seen committed is acknowledged) and checked with `PRAGMA integrity_check`.

    The transitions start once the agent has read every controller (a transition made before
    that, and gone from the ring by the agent's first read, is one the agent never watched). A
    start slower than the ring's capacity at `rate` (10 entries per controller: about 7 s on
    average at the default rate over 4 controllers; a busy machine can take that long to start
    the agent) overruns a ring while the agent is down: those transitions are counted as accounted when they
    lie inside an overrun (or gap) record of their source and boot (`inside_gaps`), never when
    they had been committed before.
    """
    rng = random.Random(seed)
    db = work / "events.db"
    t0 = time.monotonic()
    async with rig(work, devices=4) as (plant, rx, agent, load):
        tracker = checker.Tracker(db)
        await agent.start()
        await agent.started()
        names = set(plant.controllers)
        await eventually(lambda: names <= _boots_seen(db), 30, "every controller read once")
        await agent.kill9()
        tracker.snapshot()
        load.start(rate, seed)
        for _ in range(kills):
            await agent.start()
            if rng.random() < 0.2:
                await asyncio.sleep(rng.uniform(0.05, 0.9))
            else:
                await agent.started()
                await asyncio.sleep(rng.uniform(0.0, 1.2))
            await agent.kill9()
            tracker.snapshot()
        await load.halt()
        verdict = await drain_and_check(agent, rx, db, load, tracker, gaps_accounted=True)
    return {
        "kills": kills,
        "seed": seed,
        "acknowledged": verdict.acknowledged,
        "lost": len(verdict.lost),
        "inside_gaps": verdict.inside_gaps,
        "duplicates": len(verdict.duplicates),
        "integrity_failures": len(verdict.integrity),
        "canonical_without_outbox": verdict.without_outbox,
        "made": verdict.made,
        "committed": verdict.committed,
        "upstream_distinct": verdict.upstream_distinct,
        "upstream_redeliveries": rx.redeliveries,
        "upstream_missing": len(verdict.upstream_missing),
        "upstream_invented": len(verdict.upstream_invented),
        "tracebacks": verdict.tracebacks,
        "ring_overruns": overruns(db),
        "seconds": round(time.monotonic() - t0, 1),
        "problems": verdict.problems(),
    }


async def stop_campaign(work: Path, *, stops: int, seed: int, rate: float = 100.0) -> dict[str, Any]:
    """`stops` x (build a backlog while the upstream fails, let it come back slowly, SIGTERM
    mid-drain). Every fifth round the upstream hangs instead (takes a request, never answers):
    the drain is then cut at its bound. Each stop must exit 0 within the unit's TimeoutStopSec;
    nothing committed may be lost, and what was not acknowledged goes out after the next start.
    """
    rng = random.Random(seed)
    db = work / "events.db"
    worst = 0.0
    codes: list[int] = []
    async with rig(work, devices=4, batch_size=20) as (_plant, rx, agent, load):
        tracker = checker.Tracker(db)
        for n in range(stops):
            await agent.start()
            await agent.started()
            rx.fail(503)
            load.start(rate, rng.randrange(1 << 30))
            await asyncio.sleep(rng.uniform(0.5, 1.0))
            await load.halt()
            await eventually(lambda: load.made <= set(checker.committed_keys(db)), 20, "polled and committed")
            rx.stall(None if n % 5 == 4 else 0.2)  # hangs, or answers each batch of 20 after 0.2 s
            rx.heal()
            await asyncio.sleep(rng.uniform(0.0, 0.8))  # the drain is under way
            rc, took = await agent.stop()
            rx.release()
            codes.append(rc)
            worst = max(worst, took)
            tracker.snapshot()
        verdict = await drain_and_check(agent, rx, db, load, tracker)
    return {
        "stops": stops,
        "exit_codes": sorted(set(codes)),
        "worst_stop_s": round(worst, 2),
        "drains_cut": agent.log.read_text(errors="replace").count(DRAIN_CUT),
        **verdict.figures(),
        "problems": verdict.problems(),
    }


async def resume_kill_campaign(
    work: Path, *, kills: int, seed: int, rate: float = 8.0, ring: int = 3, devices: int = 3,
    up_s: float = 1.2, down_s: float = 0.6,
) -> dict[str, Any]:  # fmt: skip
    """`kills` x (start the agent, let it poll for a random time, kill -9, leave it down for a
    random time) while the controllers change all the time and keep only `ring` entries.

    What is checked is silent loss: every transition the simulators made after the agent first
    watched them is a canonical event, or lies inside a gap or overrun record of its source and
    boot (`checker.account`). One kill in five lands during start-up, the others up to `up_s`
    after it; the agent stays down for up to `down_s` after each kill (the counters move on
    meanwhile, as they do during each start). Ends with a clean stop.
    """
    rng = random.Random(seed)
    db = work / "events.db"
    t0 = time.monotonic()
    async with rig(work, devices=devices, ring=ring) as (plant, _rx, agent, load):
        await agent.start()
        await agent.started()
        names = set(plant.controllers)
        await eventually(lambda: names <= _boots_seen(db), 30, "every controller read once")
        load.start(rate, seed)
        for _ in range(kills):
            if rng.random() < 0.2:
                await asyncio.sleep(rng.uniform(0.05, 0.9))
            else:
                await agent.started()
                await asyncio.sleep(rng.uniform(0.1, up_s))
            await agent.kill9()
            await asyncio.sleep(rng.uniform(0.0, down_s))
            await agent.start()
        await load.halt()
        await agent.started()
        last = {(k[0], k[2]): k for k in sorted(load.made, key=lambda k: int(k[1]))}
        await eventually(lambda: set(last.values()) <= set(checker.committed_keys(db)), 60, "caught up")
        rc, _ = await agent.stop()
        assert rc == 0, agent.this_run()[-3000:]
    accounting = checker.account(db, load.made)
    keys = checker.committed_keys(db)
    text = agent.log.read_text(errors="replace")
    return {
        "kills": kills,
        "seed": seed,
        "ring": ring,
        **accounting.figures(),
        "gap_records": _count(db, "SELECT count(*) FROM anomalies WHERE kind = 'gap'"),
        "overrun_records": _count(db, "SELECT count(*) FROM anomalies WHERE kind = 'overrun'"),
        "duplicates": sum(1 for n in keys.values() if n > 1),
        "integrity": checker.integrity(db),
        "tracebacks": text.count("Traceback"),
        "seconds": round(time.monotonic() - t0, 1),
        "lost_examples": accounting.lost_silently[:5],
    }


def _boots_seen(db: Path) -> set[str]:
    if not db.exists():
        return set()
    con = checker.connect_ro(db)
    try:
        return {str(r[0]) for r in con.execute("SELECT device FROM boots").fetchall()}
    except Exception:  # not created yet
        return set()
    finally:
        con.close()


def _count(db: Path, sql: str) -> int:
    con = checker.connect_ro(db)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()

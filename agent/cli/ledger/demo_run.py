"""`edge-agent ledger demo`: two gateways read one simulated PLC and publish to an MQTT broker;
the ledger (a real `edge-agent ledger run`) keeps one canonical event per transition with one
arrival from each gateway. Every part is a real process of this program; the demo starts them,
stops them (SIGTERM) and prints the ledger's report and its own check of the demo's events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO, Any

from agent.store.reader import Reader

GATEWAYS = ("gw-1", "gw-2")

_DEVICE = """devices:
  - name: PUMP-07
    connections:
      - modbus: {{host: 127.0.0.1, port: {port}, unit: 1}}
    poll: 250ms
    boot_id: {{register: 0, type: uint32}}
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 12, type: uint16, values: {{0: Normal, 1: Trip}}}}
        source_timestamp: {{register: 13, type: uint64, unit: ms, epoch: unix}}
"""


class DemoFailed(Exception):
    """A part of the demo did not start; the message says which and where its log is."""


def gateway_config(name: str, site: str, work: Path, host: str, port: int, modbus_port: int) -> str:
    return (
        f"site: {site}\ngateway: {name}\nstore: {{path: '{work / name}.db'}}\n"
        f"upstreams:\n  - name: ledger\n    mqtt: {{url: 'mqtt://{host}:{port}',"
        " topic: '{site}/events/{device}/{channel}', receipts: true}\n" + _DEVICE.format(port=modbus_port)
    )


def ledger_config(site: str, host: str, port: int, client_id: str) -> str:
    return (
        f"mqtt: {{host: '{host}', port: {port}, topic: '{site}/events/#',"
        f" client_id: {client_id}, session_expiry_s: 3600}}\n"
        f"status_topic: '{site}/status/+'\n"  # its own site's status records only, as its events
    )


def forget_session(host: str, port: int, client_id: str) -> None:
    """End the demo ledger's persistent session at the broker (a clean start with no expiry), so
    the broker keeps nothing queued for a client that never comes back."""
    import asyncio

    import aiomqtt

    async def go() -> None:
        async with aiomqtt.Client(
            host,
            port,
            identifier=client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=True,
            timeout=10,
        ):
            pass

    # A broker that is gone keeps nothing of ours we could reach.
    with contextlib.suppress(aiomqtt.MqttError, OSError):
        asyncio.run(go())


def broker_reachable(host: str, port: int) -> str | None:
    """None when something listens at host:port, else why not (checked before anything starts)."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"no MQTT broker at {host}:{port} ({exc.strerror or exc})"
    return None


def _wait(pred: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            raise DemoFailed(f"{what} did not happen within {timeout:.0f} s; {log}:\n{tail}")
        time.sleep(0.1)


def _has_read(db: Path) -> bool:
    """Whether the gateway with this store has read the PLC once (its boot is recorded live)."""
    if not db.exists():
        return False

    async def go() -> bool:
        try:
            async with await Reader.open(db) as reader:
                return "PUMP-07" in await reader.last_live_boots()
        except Exception:  # a store still being created: not read yet, try again
            return False

    return asyncio.run(go())


def _step(sim: subprocess.Popen[Any], state: int, log: Path) -> None:
    """One transition of PUMP-07/Trip through the simulator's command line (OK or ERR back)."""
    assert sim.stdin is not None and sim.stdout is not None
    sim.stdin.write(f"{{transition: PUMP-07/Trip, state: {1 - state}}}\n")
    sim.stdin.flush()
    answer = sim.stdout.readline()
    if not answer.startswith("OK"):
        raise DemoFailed(f"the simulator refused a transition: {answer.strip() or 'no answer'}; see {log}")


def _ready_port(stream: IO[str], log: Path) -> int:
    line = stream.readline()
    if not line.startswith("READY "):
        raise DemoFailed(f"the simulator did not start: {line.strip() or 'no output'}; see {log}")
    ready: dict[str, Any] = json.loads(line[len("READY ") :])
    return int(ready["modbus"]["PUMP-07"]["port"])


def _start_simulator(
    start: Callable[..., subprocess.Popen[Any]], log: Path
) -> tuple[subprocess.Popen[Any], int]:
    """The simulated PLC, driven over its stdin; returns it and its Modbus port.

    The demo drives the PLC itself (one transition a second), and only once both gateways have
    read it: a transition made before a gateway's first read is not that gateway's to see, and
    every demo event should show two arrivals."""
    sim = start(
        ["simulate", "--no-opcua", "--modbus-port", "0", "--commands", "--quiet"],
        log,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sim.stdout is not None and sim.stdin is not None
    return sim, _ready_port(sim.stdout, log)


def _stop_in_order(procs: list[subprocess.Popen[Any]]) -> None:
    """The demo's processes as started (ledger, simulator, gateways) stopped simulator first, then
    the gateways once their last events reached the broker, then the ledger."""
    ledger, sim, gateways = procs[0], procs[1], procs[2:]
    if sim.stdin is not None:
        sim.stdin.close()
    _stop([sim])
    time.sleep(2.0)  # the gateways' last events reach the broker and the ledger
    _stop(gateways)
    time.sleep(1.0)
    _stop([ledger])


def _gateways_read(work: Path) -> None:
    """Until every demo gateway has read the PLC once (its store says so)."""
    for name in GATEWAYS:
        store = work / f"{name}.db"
        _wait(partial(_has_read, store), 60, f"{name}'s first read", work / f"{name}.log")


def _ledger_subscribed(ledger: subprocess.Popen[Any], log: Path) -> None:
    """Until the ledger says it subscribed; DemoFailed with its log when it exits first."""
    _wait(
        lambda: "mqtt intake subscribed" in log.read_text(errors="replace") or ledger.poll() is not None,
        60,
        "the ledger's subscription",
        log,
    )
    if ledger.poll() is not None:
        raise DemoFailed(f"the ledger exited ({ledger.returncode}); {log}:\n{log.read_text()}")


def run(
    *,
    dsn: str | None,
    mqtt_host: str,
    mqtt_port: int,
    seconds: float,
    keep: str | None,
    say: Callable[[str], None],
) -> tuple[Path, str]:
    """Run the demo; returns its directory and the site name its events carry."""
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="edge-ledger-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    site = "demo-" + secrets.token_hex(3)  # its own topic: other traffic on the broker stays out
    env = dict(os.environ)
    if dsn is not None:
        env["EDGE_LEDGER_DSN"] = dsn  # not on a command line, where `ps` would show it
    agent = [sys.executable, "-m", "agent"]
    procs: list[subprocess.Popen[Any]] = []

    def start(args: list[str], log: Path, **kw: Any) -> subprocess.Popen[Any]:
        p = subprocess.Popen([*agent, *args], stderr=log.open("ab"), env=env, **kw)
        procs.append(p)
        return p

    try:
        client_id = f"ledger-{site}"
        cfg = work / "ledger.yaml"
        cfg.write_text(ledger_config(site, mqtt_host, mqtt_port, client_id))
        ledger = start(["ledger", "run", "-c", str(cfg)], work / "ledger.log", stdout=subprocess.DEVNULL)
        _ledger_subscribed(ledger, work / "ledger.log")
        say(f"ledger subscribed to {site}/events/# on {mqtt_host}:{mqtt_port}")
        sim_log = work / "simulator.log"
        sim, modbus_port = _start_simulator(start, sim_log)
        say(f"simulated PLC PUMP-07 on Modbus 127.0.0.1:{modbus_port}")
        for name in GATEWAYS:
            gw = work / f"{name}.yaml"
            gw.write_text(gateway_config(name, site, work, mqtt_host, mqtt_port, modbus_port))
            start(["run", "-c", str(gw)], work / f"{name}.log", stdout=subprocess.DEVNULL)
        _gateways_read(work)
        say(f"gateways {' and '.join(GATEWAYS)} read it and publish to the broker; running {seconds:g} s")
        for i in range(max(1, int(seconds))):
            _step(sim, i % 2, sim_log)
            time.sleep(1.0)
        say("stopping the simulator, then the gateways and the ledger (SIGTERM: each drains first)")
        _stop_in_order(procs)
    finally:
        _stop(procs)
        if procs:
            forget_session(mqtt_host, mqtt_port, client_id)
    if procs[0].returncode != 0:
        raise DemoFailed(f"the ledger exited with {procs[0].returncode}; see {work / 'ledger.log'}")
    return work, site


def _stop(procs: list[subprocess.Popen[Any]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

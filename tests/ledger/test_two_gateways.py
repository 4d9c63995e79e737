"""The README's demo as a test: two gateways (two `edge-agent run`, different `gateway` names) read
one simulated PLC and publish to our own Mosquitto; the ledger shows one canonical event per
transition with two arrivals, one per gateway, and one BootObserved per boot."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from mosquitto import MOSQUITTO, Broker
from pipeline import wait_for

pytestmark = pytest.mark.skipif(
    MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)"
)

AGENT = [sys.executable, "-m", "agent"]


def read_until(stream: IO[str], marker: str, timeout: float = 60) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} in:\n" + "\n".join(lines))


def gateway_config(tmp_path: Path, name: str, devices: str, broker_port: int) -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(
        f"site: plant\ngateway: {name}\nstore: {{path: '{tmp_path / name}.db'}}\n"
        f"upstreams:\n  - name: ledger\n    mqtt: {{url: 'mqtt://127.0.0.1:{broker_port}',"
        " topic: '{site}/events/{device}/{channel}'}\n" + devices + "\n"
    )
    return f


def step(sim: subprocess.Popen[str], command: str) -> None:
    assert sim.stdin is not None and sim.stdout is not None
    sim.stdin.write(command + "\n")
    sim.stdin.flush()
    assert read_until(sim.stdout, "OK", 30)[-1].startswith("OK")


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def test_two_gateways_one_plc_one_canonical_per_transition_with_two_arrivals(
    tmp_path: Path, ledger_dsn: str
) -> None:
    broker = Broker(tmp_path)
    procs: list[subprocess.Popen[Any]] = []
    try:
        ledger_cfg = tmp_path / "ledger.yaml"
        ledger_cfg.write_text(
            f"dsn: '{ledger_dsn}'\nmqtt: {{host: 127.0.0.1, port: {broker.port}, topic: '+/events/#',"
            " group: ledger, client_id: ledger-1}\n"
        )
        ledger_log = tmp_path / "ledger.log"
        procs.append(
            subprocess.Popen([*AGENT, "ledger", "run", "-c", str(ledger_cfg)], stderr=ledger_log.open("w"))
        )
        wait_for(lambda: "mqtt intake subscribed" in ledger_log.read_text(), 60, "the ledger's subscription")
        sim = subprocess.Popen(
            [*AGENT, "simulate", "--modbus-port", "0", "--no-opcua", "--commands", "--poll", "100ms"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(sim)
        assert sim.stdout is not None
        snippet = read_until(sim.stdout, "word_order")
        devices = "\n".join(snippet[snippet.index("devices:") :])
        for name in ("gw-1", "gw-2"):
            cfg = gateway_config(tmp_path, name, devices, broker.port)
            procs.append(
                subprocess.Popen(
                    [*AGENT, "run", "-c", str(cfg)],
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp_path / f"{name}.log").open("w"),
                )
            )
        # Both gateways have seen the PLC's boot before anything happens (one BootObserved each, merged).
        wait_for(
            lambda: (
                rows(ledger_dsn, "SELECT count(DISTINCT gateway) FROM arrival WHERE kind = 'boot_observed'")[
                    0
                ][0]
                == 2
            ),
            90,
            "both gateways' boot sightings",
        )
        for n, state in enumerate((1, 0, 1, 0, 1, 0)):
            step(sim, f"{{transition: PUMP-07/Trip, state: {state}}}")
            time.sleep(0.3)
            if n == 2:  # kill -9 of the ledger mid-stream: the gateways' messages wait at the broker
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait()
                procs[0] = subprocess.Popen(
                    [*AGENT, "ledger", "run", "-c", str(ledger_cfg)], stderr=ledger_log.open("a")
                )
        step(sim, "{restart: PUMP-07}")
        time.sleep(1.0)
        for state in (1, 0):
            step(sim, f"{{transition: PUMP-07/Trip, state: {state}}}")
            time.sleep(0.3)
        wait_for(
            lambda: rows(ledger_dsn, "SELECT count(*) FROM arrival WHERE kind = 'transition'")[0][0] >= 16,
            90,
            "8 transitions from each gateway",
        )
        wait_for(lambda: ledger_log.read_text().count("mqtt intake subscribed") >= 2, 60, "the restart")
        time.sleep(1.0)
        for name in ("gw-1", "gw-2"):  # each gateway's outbox has drained: every event acknowledged
            out = subprocess.run(
                [*AGENT, "--db", str(tmp_path / f"{name}.db"), "outbox", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            (up,) = [json.loads(line) for line in out.splitlines()]
            assert up["pending"] == 0, up
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        broker.stop()
    per_event = rows(
        ledger_dsn,
        "SELECT c.boot_id, c.transition_id, count(a.id), array_agg(DISTINCT a.gateway ORDER BY a.gateway)"
        " FROM canonical_event c JOIN arrival a ON a.canonical_id = c.id GROUP BY c.id ORDER BY c.id",
    )
    assert len(per_event) == 8, per_event
    assert all(n == 2 and gws == ["gw-1", "gw-2"] for _, _, n, gws in per_event), per_event
    boots = rows(ledger_dsn, "SELECT device, boot_id FROM boot ORDER BY id")
    assert [b for _, b in boots] == ["17", "18"] and {d for d, _ in boots} == {"plant/PUMP-07"}, boots
    summary = json.loads(
        subprocess.run(
            [*AGENT, "ledger", "--dsn", ledger_dsn, "report", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )["summary"]
    assert (summary["source_events"], summary["duplicates"], summary["boots"]) == (8, 8, 2)

"""`edge-agent ledger demo` (the README's one command) with our own Mosquitto and a new database:
two gateways, one simulated PLC, every demo event one canonical event with two arrivals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mosquitto import MOSQUITTO, Broker

CMD = [sys.executable, "-m", "agent", "ledger"]


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
def test_the_demo_shows_one_canonical_event_with_two_arrivals_per_transition(
    tmp_path: Path, pg_dsn: str
) -> None:
    broker = Broker(tmp_path)
    try:
        mqtt, keep = f"127.0.0.1:{broker.port}", str(tmp_path / "demo")
        proc = subprocess.run(
            [*CMD, "--dsn", pg_dsn, "demo", "--mqtt", mqtt, "--seconds", "4", "--keep", keep],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        broker.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(
        r"demo \((demo-[0-9a-f]{6})\): (\d+) canonical events from (\d+) arrivals; (\d+) of them arrived"
        r" from both gateways; 1 boot observed",
        proc.stdout,
    )
    assert m is not None, proc.stdout
    events, arrivals, both = int(m[2]), int(m[3]), int(m[4])
    assert events > 0 and both == events and arrivals == 2 * events
    rows = [line for line in proc.stdout.splitlines() if line.split()[1:2] == [f"{m[1]}/PUMP-07/Trip"]]
    assert len(rows) == events and all("gw-1,gw-2" in row for row in rows)
    assert (tmp_path / "demo" / "gw-1.db").exists() and (tmp_path / "demo" / "ledger.log").exists()


def test_the_demo_refuses_a_broker_address_without_a_port() -> None:
    proc = subprocess.run([*CMD, "demo", "--mqtt", "localhost"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "must be HOST:PORT" in proc.stderr


def test_the_demo_without_a_broker_says_so_and_exits_69() -> None:
    from pgcluster import free_port

    mqtt = f"127.0.0.1:{free_port()}"
    proc = subprocess.run([*CMD, "demo", "--mqtt", mqtt], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 69 and f"no MQTT broker at {mqtt}" in proc.stderr, proc.stderr

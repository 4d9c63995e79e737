"""`edge-agent ledger demo` (the README's one command) with our own Mosquitto and a new database:
two gateways, one simulated PLC, every demo event one canonical event with two arrivals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from mosquitto import MOSQUITTO, Broker

from agent.cli.ledger.throwaway import listening

CMD = [sys.executable, "-m", "agent", "ledger"]


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
def test_the_demo_on_a_machine_without_postgresql_configured_ends_on_the_review_page(
    tmp_path: Path, pg_cluster: object
) -> None:
    """No --dsn and no PG* variable: a throwaway cluster of the demo's own (pg_cluster only makes
    the test skip where the server binaries are missing); --web keeps the review page open, showing
    the added conflict and pending arrival, until SIGINT (Ctrl-C); then everything is removed."""
    broker = Broker(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "EDGE_LEDGER_DSN"}
    env["PYTHONUNBUFFERED"] = "1"
    try:
        mqtt, keep = f"127.0.0.1:{broker.port}", str(tmp_path / "demo")
        args = [
            "demo",
            "--mqtt",
            mqtt,
            "--seconds",
            "4",
            "--keep",
            keep,
            "--web",
            "--web-listen",
            "127.0.0.1:0",
        ]
        proc = subprocess.Popen(
            [*CMD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout is not None
        out: list[str] = []
        for line in proc.stdout:
            out.append(line)
            if "review page: http://" in line:
                break
        text = "".join(out)
        page = re.search(r"review page: (http://127\.0\.0\.1:\d+/)", text)
        assert page is not None, text + (proc.stderr.read() if proc.stderr else "")
        pg = re.search(r"started a throwaway one on 127\.0\.0\.1:(\d+)", text)
        assert pg is not None, text
        conflicts = urllib.request.urlopen(page.group(1) + "conflicts", timeout=10).read().decode()
        pending = urllib.request.urlopen(page.group(1) + "pending", timeout=10).read().decode()
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        broker.stop()
    assert proc.returncode == 0, text + rest + err
    m = re.search(
        r"demo \((demo-[0-9a-f]{6})\): (\d+) canonical events from (\d+) arrivals; (\d+) of them arrived"
        r" from both gateways; 1 boot observed",
        text,
    )
    assert m is not None, text
    events, arrivals, both = int(m[2]), int(m[3]), int(m[4])
    assert events > 0 and both == events and arrivals == 2 * events
    rows = [line for line in text.splitlines() if line.split()[1:2] == [f"{m[1]}/PUMP-07/Trip"]]
    assert len(rows) == events and all("gw-1,gw-2" in row for row in rows)
    assert f"{m[1]}-review/PUMP-08/Trip" in conflicts and "&quot;Low&quot;" in conflicts
    assert f"{m[1]}-review/CTRL-03/OverTemp" in pending
    assert (tmp_path / "demo" / "gw-1.db").exists() and (tmp_path / "demo" / "ledger.log").exists()
    assert not listening(int(pg.group(1))), "the throwaway PostgreSQL is stopped at the end"


def test_the_demo_refuses_a_broker_address_without_a_port() -> None:
    proc = subprocess.run([*CMD, "demo", "--mqtt", "localhost"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "must be HOST:PORT" in proc.stderr


def test_the_demo_without_a_broker_says_so_and_exits_69() -> None:
    from pgcluster import free_port

    mqtt = f"127.0.0.1:{free_port()}"
    proc = subprocess.run([*CMD, "demo", "--mqtt", mqtt], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 69 and f"no MQTT broker at {mqtt}" in proc.stderr, proc.stderr

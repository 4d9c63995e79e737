"""`edge-agent ledger run` as a real process reloads `ledger.yaml` on SIGHUP (issue 34): a new intake
topic is subscribed (and the old one no longer), a new review token signs in (and the old one no
longer), an invalid file changes nothing and names its file:line; the process never restarts."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from mosquitto import MOSQUITTO, Broker
from pgcluster import free_port
from test_mqtt_intake import bodies, publish

pytestmark = [
    pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
    pytest.mark.timeout(120),
]


METRICS = free_port()


def scrape() -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def write(path: Path, dsn: str, broker: Broker, topic: str, web: int, token: Path) -> None:
    path.write_text(
        f"dsn: '{dsn}'\nmetrics: {{listen: '127.0.0.1:{METRICS}'}}\n"
        f"mqtt: {{host: 127.0.0.1, port: {broker.port}, topic: '{topic}', client_id: ledger-reload}}\n"
        f"web: {{listen: '127.0.0.1:{web}', token_file: '{token}'}}\n"
    )


def canonical_sources(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT source FROM canonical_event").fetchall()}


def signs_in(port: int, token: str) -> bool:
    """POST /login with `token`: 303 to the page when it is the token, else the form again."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/login",
        data=urllib.parse.urlencode({"token": token, "next": "/"}).encode(),
        headers={"Origin": f"http://127.0.0.1:{port}"},
    )

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=10) as resp:
            return bool(resp.status == 303)
    except urllib.error.HTTPError as exc:
        return exc.code == 303


async def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


async def test_sighup_moves_the_intake_and_the_token_and_an_invalid_file_changes_nothing(
    tmp_path: Path, ledger_dsn: str, broker: Broker
) -> None:
    web, token = free_port(), tmp_path / "token"
    token.write_text("first-token-0001\n")
    config, log = tmp_path / "ledger.yaml", tmp_path / "ledger.log"
    write(config, ledger_dsn, broker, "site-a/events/#", web, token)
    cmd = [sys.executable, "-m", "agent", "ledger", "run", "-c", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    try:
        a, b = bodies(2, "gw-a", 1), bodies(4, "gw-b", 1)[2:]  # T0/T1 on site-a, T2/T3 on site-b
        await until(lambda: "ledger running" in log.read_text() and signs_in(web, "first-token-0001"))
        await publish(broker.port, a[:1], topic="site-a/events/x")
        await until(lambda: len(canonical_sources(ledger_dsn)) == 1)

        write(config, ledger_dsn, broker, "site-b/events/#", web, token)
        token.write_text("second-token-0002\n")
        proc.send_signal(signal.SIGHUP)
        await until(lambda: "ledger reload applied" in log.read_text())
        # The new subscription exists from the moment the restarted intake subscribes (MQTT keeps no
        # message for a topic nobody subscribed to): publish after it, as a gateway's resend would.
        await until(lambda: "mqtt intake subscribed site-b/events/#" in log.read_text())
        await publish(broker.port, a[1:], topic="site-a/events/x")  # no longer subscribed
        await publish(broker.port, b, topic="site-b/events/x")
        await until(lambda: len(canonical_sources(ledger_dsn)) == 3)
        await asyncio.sleep(1)
        assert len(canonical_sources(ledger_dsn)) == 3, "site-a's second event was not taken"
        assert signs_in(web, "second-token-0002") and not signs_in(web, "first-token-0001")
        applied = scrape()

        config.write_text(config.read_text().replace("mqtt: {", "mqtt: {bogus: 1, "))
        proc.send_signal(signal.SIGHUP)
        await until(lambda: "ledger reload refused" in log.read_text())
        await publish(broker.port, bodies(5, "gw-b", 1)[4:], topic="site-b/events/x")  # still taken
        await until(lambda: len(canonical_sources(ledger_dsn)) == 4)
        assert proc.poll() is None, "the ledger never restarted"
        invalid = scrape()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert f"{config}:" in text and "bogus" in text, text
    assert "ledger reload applied: MQTT intake restarted; review token read again" in text, text
    assert 'edge_ledger_config_reloads_total{result="applied"} 1.0' in applied
    assert "edge_ledger_config_last_reload_successful 1.0" in applied
    assert 'edge_ledger_config_reloads_total{result="invalid"} 1.0' in invalid
    assert "edge_ledger_config_last_reload_successful 0.0" in invalid
    hashes = [
        re.findall(r'edge_ledger_config_info\{hash="([0-9a-f]{12})"\} 1.0', t) for t in (applied, invalid)
    ]
    assert len(hashes[0]) == 1 and hashes[0] == hashes[1], "the invalid file is not in force"

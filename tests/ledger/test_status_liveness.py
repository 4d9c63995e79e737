"""Issue 36, item 1, as it was reproduced: a gateway killed -9, then the broker restarted while the
gateway stays dead. The broker delivers the gateway's retained status record again when the ledger
subscribes anew; that old record must not make the dead gateway look heard. Real processes: a
simulated PLC, `edge-agent run`, Mosquitto (persistence, so the retained record survives), `edge-agent
ledger run` and PostgreSQL."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from mosquitto import MOSQUITTO, Broker
from pipeline import Pipeline, ledger_rows, wait_for

from agent.ledger.web import queries

pytestmark = [
    pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
    pytest.mark.timeout(240),
]


def status_row(dsn: str) -> tuple[Any, ...]:
    (row,) = ledger_rows(dsn, "SELECT reported_at, received_at FROM gateway_status WHERE gateway = 'gw-1'")
    return row


def state(dsn: str) -> str | None:
    (row,) = ledger_rows(dsn, "SELECT status->>'state' FROM gateway_status WHERE gateway = 'gw-1'")
    return row[0]  # type: ignore[no-any-return]


def fleet(dsn: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        cur = conn.execute(queries.FLEET)
        names = [c.name for c in cur.description or ()]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    (gw,) = [r for r in rows if r["gateway"] == "gw-1"]
    return gw


def test_a_retained_status_delivered_again_does_not_make_a_dead_gateway_heard(
    tmp_path: Path, ledger_dsn: str
) -> None:
    broker = Broker(tmp_path)
    pipe = Pipeline(tmp_path, ledger_dsn, broker, status_every="1s")
    try:
        wait_for(
            lambda: ledger_rows(ledger_dsn, "SELECT count(*) FROM gateway_status")[0][0] == 1, 60, "a status"
        )
        time.sleep(2.5)  # a few records, each newer than the one before
        pipe.gateway.send_signal(signal.SIGKILL)
        pipe.gateway.wait()
        killed = time.monotonic()
        pipe.sim.send_signal(signal.SIGTERM)  # nothing arrives from the PLC any more either
        # The broker publishes the gateway's MQTT Will: the fleet shows the crash at once.
        wait_for(lambda: state(ledger_dsn) == "offline", 30, "the gateway's Will (offline)")
        assert time.monotonic() - killed < 30
        time.sleep(1.0)
        reported, received = status_row(ledger_dsn)
        killed_at = time.time()
        pipe.restart_broker()
        time.sleep(3.0)  # the retained record has come again by now
        assert status_row(ledger_dsn) == (reported, received), "the same record again changes nothing"
        assert state(ledger_dsn) == "offline"
        gw = fleet(ledger_dsn)
        assert gw["status_heard_at"] == reported
        assert gw["silent_s"] >= time.time() - killed_at, (
            "silent since the gateway died, not since the broker came back"
        )
    finally:
        pipe.stop()
        broker.kill()


def test_a_quiet_gateway_is_heard_again_after_a_broker_restart(tmp_path: Path, ledger_dsn: str) -> None:
    """A gateway whose PLC makes no transitions has no event to send; its status records still go
    out on schedule after the broker was killed and started again (it used to connect only to
    send events, and stayed silent while alive)."""
    broker = Broker(tmp_path)
    pipe = Pipeline(tmp_path, ledger_dsn, broker, status_every="1s", rate=0)
    try:
        wait_for(
            lambda: ledger_rows(ledger_dsn, "SELECT count(*) FROM gateway_status")[0][0] == 1, 60, "a status"
        )
        pipe.restart_broker()
        back = time.time()
        reported_before = status_row(ledger_dsn)[0]
        wait_for(
            lambda: status_row(ledger_dsn)[0].timestamp() > max(back, reported_before.timestamp()),
            20,
            "a status record made after the broker came back",
        )
        assert pipe.gateway.poll() is None
        assert ledger_rows(ledger_dsn, "SELECT count(*) FROM canonical_event")[0][0] == 0, "a quiet PLC"
    finally:
        pipe.stop()
        broker.kill()


def test_a_clean_stop_says_stopped_and_leaves_no_will(tmp_path: Path, ledger_dsn: str) -> None:
    broker = Broker(tmp_path)
    pipe = Pipeline(tmp_path, ledger_dsn, broker, status_every="1s", rate=0)
    try:
        wait_for(
            lambda: ledger_rows(ledger_dsn, "SELECT count(*) FROM gateway_status")[0][0] == 1, 60, "a status"
        )
        wait_for(lambda: state(ledger_dsn) == "running", 30, "a running record")
        pipe.gateway.send_signal(signal.SIGTERM)
        assert pipe.gateway.wait(timeout=60) == 0
        wait_for(lambda: state(ledger_dsn) == "stopped", 30, "the last record of a clean stop")
        time.sleep(2.0)  # a DISCONNECT: the broker publishes no Will
        assert state(ledger_dsn) == "stopped"
        # The ledger's lines carry their time off journald, as the gateway's do (issue 38).
        first = pipe.ledger_log.read_text().splitlines()[0]
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ agent\.ledger", first), first
    finally:
        pipe.stop()
        broker.kill()

"""`edge-agent demo` as a real process: it exits 0 and its store holds what the demo promised."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def test_demo_runs_and_its_report_shows_the_mission(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "demo", "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for words in (
        "restarts",
        "goes away",
        "link to VALVE-01 is cut",
        "source events (canonical)",
        "boots observed",
        "identity-incomplete",
        "upstream (embedded HTTP receiver)",
        "demo finished",
    ):
        assert words in out, words
    m = re.search(r"demo finished in ([\d.]+) s", out)
    assert m and float(m.group(1)) < 60
    con = sqlite3.connect(tmp_path / "events.db")
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    boots = q("SELECT device, boot_id, previous_boot_id FROM boots ORDER BY boot_row")
    assert ("PUMP-07", "18", "17") in boots, "the restart is a generation change"
    assert not any(d == "LEGACY-09" for d, _, _ in boots), "no boot id is made up"
    assert q("SELECT count(*) FROM pending")[0][0] >= 1
    assert (
        q(
            "SELECT count(*) FROM arrivals WHERE source LIKE 'LEGACY-09/%' AND decision <> 'identity_incomplete'"
        )[0][0]
        == 0
    )
    # The cut: VALVE-01 changed 3 times while unreachable. After reconnect the newest is in the live
    # snapshot and the ones before it come from the ring, marked buffered; none is lost, none is a gap.
    ring = (
        "SELECT count(*) FROM arrivals WHERE source = 'VALVE-01/Open' AND live = 0 AND decision = 'inserted'"
    )
    assert q(ring)[0][0] >= 2
    assert q("SELECT count(*) FROM events WHERE source = 'VALVE-01/Open'")[0][0] == 8
    assert q("SELECT count(*) FROM anomalies")[0][0] == 0
    # PUMP-07 is read over two paths: one canonical per transition, arrivals from both receivers.
    receivers = q("SELECT count(DISTINCT receiver) FROM arrivals WHERE source LIKE 'PUMP-07/%'")[0][0]
    assert receivers == 2
    assert q("SELECT count(*) FROM arrivals WHERE decision = 'conflict'")[0][0] == 0
    assert q("SELECT count(*) FROM outbox WHERE state <> 'delivered'")[0][0] == 0
    records = q(
        "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM boots) + (SELECT count(*) FROM pending)"
        " + (SELECT count(*) FROM anomalies)"
    )[0][0]
    distinct = int(re.search(r"(\d+) distinct ids", out).group(1))  # type: ignore[union-attr]
    assert distinct == records, "every record reached the upstream, each under its own id"
    con.close()

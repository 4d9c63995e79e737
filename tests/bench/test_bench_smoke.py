"""A tiny smoke run of every benchmark in bench/, so none can rot unnoticed.

Each bench runs as its own process (``sys.executable``, cwd the repository root) at the
smallest size that still does the real work, and must exit 0 and print its figures as one JSON
line: a rate for the agent, a rate for the same-run baseline and their ratio. These tests check
that the figures are there and consistent; they never judge the speed of this machine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE_TIMEOUT_S = 60


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_bench(script: str, *args: str) -> dict[str, Any]:
    """Run ``bench/<script>`` with ``args``; its last stdout line, parsed as a JSON object."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing:\n{proc.stderr[-3000:]}"
    figures = json.loads(lines[-1])
    assert isinstance(figures, dict), f"{script}: last line is not a JSON object: {lines[-1]!r}"
    return figures


def assert_compared(agent_rate: Any, baseline_rate: Any, ratio: Any, share: float = 1.0) -> None:
    """Both rates are positive numbers and ``ratio`` is agent (times ``share``) over baseline."""
    for figure in (agent_rate, baseline_rate, ratio):
        assert isinstance(figure, int | float) and not isinstance(figure, bool), figure
    assert agent_rate > 0 and baseline_rate > 0
    assert ratio == pytest.approx(agent_rate * share / baseline_rate, rel=0.02, abs=1e-3)


def test_ingest_quick_compares_the_decision_path_with_raw_executemany() -> None:
    got = run_bench("ingest.py", "--quick")
    assert got["bench"] == "ingest"
    assert_compared(
        got["empty_dup0_batch1000"], got["raw_executemany_batch1000"], got["decision_vs_raw_batch1000"]
    )


def test_import_file_of_a_few_lines_compares_with_a_bare_parse_and_insert() -> None:
    got = run_bench("import_file.py", "--lines", "200")
    assert got["bench"] == "import_file"
    assert got["lines"] == 200
    assert_compared(
        got["import_lines_per_s"], got["baseline_parse_insert_lines_per_s"], got["ratio_vs_baseline"]
    )
    assert got["peak_rss_kib_lines"] > 0 and got["peak_rss_kib_3x_lines"] > 0


def test_poll_of_two_modbus_and_one_opcua_controller_compares_with_a_bare_read_loop() -> None:
    got = run_bench("poll.py", "--n", "2", "--m", "1", "--seconds", "1")
    assert got["bench"] == "poll"
    [run] = got["runs"]
    assert (run["n_modbus"], run["m_opcua"]) == (2, 1)
    assert run["asked_polls_per_s"] == 3 * run["poll_hz"]
    # The ratio compares the Modbus share of the agent's polls with the Modbus-only baseline.
    assert_compared(run["agent_polls_per_s"], run["baseline_polls_per_s"], run["ratio"], share=2 / 3)
    assert run["agent_cpu_share"] > 0


def test_replay_http_drain_compares_with_a_bare_post_loop() -> None:
    got = run_bench("replay.py", "--events", "200", "--sinks", "http")
    assert got["bench"] == "replay" and got["events"] == 200
    assert "mqtt" not in got and "mqtt_ratio_ge_0.8" not in got["targets"]
    http = got["http"]
    assert_compared(http["events_per_s"], http["bare_aiohttp_per_s"], http["ratio_vs_bare"])


@pytest.mark.broker
@pytest.mark.skipif(
    not listening(1883),
    reason="no MQTT broker listens on 127.0.0.1:1883 (install mosquitto): the MQTT drain of replay.py is not smoked",
)
def test_replay_mqtt_drain_compares_with_a_bare_publish_loop() -> None:
    got = run_bench("replay.py", "--events", "200", "--sinks", "mqtt")
    assert got["bench"] == "replay" and got["events"] == 200
    assert "http" not in got
    mqtt = got["mqtt"]
    assert_compared(mqtt["events_per_s"], mqtt["bare_aiomqtt_per_s"], mqtt["ratio_vs_bare"])


def test_retention_of_a_few_events_compares_pruning_with_no_pruning() -> None:
    got = run_bench("retention.py", "-n", "2000")
    assert got["bench"] == "retention" and got["n_events"] == 2000
    assert_compared(got["rate_with_pruning"], got["rate_without_pruning"], got["recorder_ratio"])
    assert got["prune_runs"] > 0 and got["size_bound_bytes"] > 0


def test_faults_one_kill_and_one_stop_find_no_problem() -> None:
    # A correctness campaign, not a rate: its figures are counts, and exit 0 means no problem.
    got = run_bench("faults.py", "--kills", "1", "--stops", "1")
    assert got["kills"] == 1 and got["stop"]["stops"] == 1
    # Something was made and committed in each campaign (with one kill at a random point, the
    # store may hold nothing yet when the kill lands on a busy machine, so `acknowledged` may be 0).
    assert got["made"] > 0 and got["committed"] > 0
    assert got["stop"]["made"] > 0 and got["stop"]["acknowledged"] > 0
    for figures in (got, got["stop"]):
        assert figures["problems"] == []
        assert figures["lost"] == 0 and figures["duplicates"] == 0 and figures["integrity_failures"] == 0


def test_ledger_quick_compares_the_arbitration_with_copy_and_bare_set_based_sql() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster

    if pgcluster.find_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    got = run_bench("ledger.py", "--quick", "--rounds", "1", "-n", "1000")
    assert got["bench"] == "ledger" and got["deliveries"] == 1000
    for dup in (0, 50):
        assert_compared(
            got[f"ledger_dup{dup}"], got[f"bare_set_based_dup{dup}"], got[f"ledger_vs_bare_dup{dup}"]
        )
        assert_compared(
            got[f"ledger_dup{dup}"], got[f"copy_ceiling_dup{dup}"], got[f"ledger_vs_copy_dup{dup}"]
        )


def test_ledger_mqtt_quick_compares_the_intake_with_a_bare_subscriber() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster
    from mosquitto import MOSQUITTO

    if pgcluster.find_binaries() is None or MOSQUITTO is None:
        pytest.skip("needs PostgreSQL server binaries (initdb, pg_ctl) and mosquitto")
    got = run_bench("ledger_mqtt.py", "--quick", "--rounds", "1", "-n", "200")
    assert got["bench"] == "ledger_mqtt" and got["messages"] == 200
    assert_compared(got["ledger_msgs_per_s"], got["bare_msgs_per_s"], got["ledger_vs_bare"])
    assert_compared(got["ledger_x2_msgs_per_s"], got["ledger_msgs_per_s"], got["two_vs_one"])

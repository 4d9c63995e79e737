"""A tiny smoke run of every benchmark in bench/, so none can rot unnoticed.

Each bench runs as its own process (``sys.executable``, cwd the repository root) at the
smallest size that still does the real work, and must exit 0 and print its figures as one JSON
line: a rate for the agent, a rate for the same-run baseline and their ratio. These tests check
that the figures are there and consistent; they never judge the speed of this machine.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.cli.ledger.throwaway import mosquitto_binary

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


def test_ingest_quick_compares_the_decision_path_with_raw_executemany_alternated() -> None:
    got = run_bench("ingest.py", "--quick", "--rounds", "2")
    assert got["bench"] == "ingest" and got["rounds"] == 2
    assert len(got["decision_rounds"]) == len(got["raw_rounds"]) == 2
    assert_compared(
        got["decision_batch1000_per_s"], got["raw_executemany_batch1000"], got["decision_vs_raw_batch1000"]
    )
    assert got["rss_peak_mb"] > 0


def test_import_file_of_a_few_lines_compares_with_a_minimal_importer() -> None:
    got = run_bench("import_file.py", "--lines", "200", "--rounds", "2")
    assert got["bench"] == "import_file"
    assert got["lines"] == 200 and got["rounds"] == 2
    assert len(got["agent_rounds"]) == len(got["baseline_rounds"]) == 2
    assert_compared(
        got["import_lines_per_s"], got["baseline_minimal_importer_lines_per_s"], got["ratio_vs_baseline"]
    )
    assert got["peak_rss_kib_lines"] > 0 and got["peak_rss_kib_3x_lines"] > 0
    # The old, lean baseline is printed beside the new one, and the decisions were checked.
    assert len(got["baseline_lean_rounds"]) == 2
    assert_compared(
        got["import_lines_per_s"], got["baseline_lean_lines_per_s"], got["ratio_vs_lean_baseline"]
    )
    assert got["decisions_checked"] == {"inserted": 100, "duplicate": 100}
    # The shapes an outsider tries (re-deliveries over the whole history, floats, non-ASCII,
    # several boots, written as a second gateway would), each with its own ratios, decided alike.
    assert set(got["shapes"]) == {"spread", "outsider"}
    for shape in got["shapes"].values():
        assert_compared(
            shape["import_lines_per_s"],
            shape["baseline_minimal_importer_lines_per_s"],
            shape["ratio_vs_baseline"],
        )
        assert_compared(
            shape["agent_cpu_us_per_line"], shape["baseline_cpu_us_per_line"], shape["cpu_per_line_ratio"]
        )
        assert shape["decisions_checked"] == {"inserted": 100, "duplicate": 100}
    ratios = [got["ratio_vs_baseline"], *(s["ratio_vs_baseline"] for s in got["shapes"].values())]
    assert got["worst_ratio_vs_baseline"] == min(ratios)


def test_minimal_importer_of_the_import_bench_decides_like_the_agent(tmp_path: Path) -> None:
    # The baseline must do a correct importer's work: the same decisions, line by line.
    sys.path.insert(0, str(ROOT))
    from bench.import_shapes import write_file

    file = tmp_path / "in.jsonl"
    write_file(file, 300)
    decisions = []
    for cmd in (
        [sys.executable, "-m", "agent", "--db", str(tmp_path / "a.db"), "import", str(file), "--json"],
        [
            sys.executable,
            str(ROOT / "bench" / "import_file.py"),
            "--minimal",
            str(tmp_path / "b.db"),
            str(file),
        ],
    ):
        out = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S, check=True
        )
        decisions.append([tuple(r.values()) for r in map(json.loads, out.stdout.splitlines())])
    assert decisions[0] == decisions[1]
    assert {r[1] for r in decisions[0]} == {"inserted", "duplicate"}


def test_minimal_importer_of_the_import_bench_decides_every_edge_line_like_the_agent(tmp_path: Path) -> None:
    # Malformed timestamps and ids, missing keys, floats, non-ASCII keys: the baseline's whole
    # result line (reasons aside: their words are the agent's own) and its payload_hash match.
    sys.path.insert(0, str(ROOT))
    from bench.import_file import EDGE_LINES, check_same_decisions

    file = tmp_path / "edge.jsonl"
    file.write_text("\n".join(EDGE_LINES) + "\n")
    counts = check_same_decisions(tmp_path, file, "edge", hashes=True)
    assert counts == {"inserted": 7, "duplicate": 2, "conflict": 1, "rejected": 11, "identity_incomplete": 2}


def test_poll_of_two_modbus_and_one_opcua_controller_compares_with_a_bare_read_loop() -> None:
    got = run_bench(
        "poll.py",
        "--n",
        "2",
        "--m",
        "1",
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--warm-up",
        "0.5",
        "--opcua",
        "1",
    )
    assert got["bench"] == "poll" and got["rounds"] == 1
    fleet = got["fleet"]
    assert (fleet["n_modbus"], fleet["m_opcua"]) == (2, 1)
    assert fleet["asked_polls_per_s"] == 3 * got["hz"]
    # The ratio compares the Modbus polls of the agent with the Modbus-only bare loop.
    assert_compared(fleet["agent_modbus_polls_per_s"], fleet["bare_polls_per_s"], fleet["ratio"])
    assert_compared(
        fleet["agent_cpu_ms_per_1000_polls"], fleet["bare_cpu_ms_per_1000_polls"], fleet["cpu_per_poll_ratio"]
    )
    assert 0 <= fleet["agent_missed_pct"] <= 100 and 0 <= fleet["bare_missed_pct"] <= 100
    one = got["one_connection"]
    assert_compared(one["agent_polls_per_s"], one["bare_polls_per_s"], one["ratio"])
    # OPC UA polled reads: the agent's pollers alone against a bare asyncua loop, the same nodes.
    ua = got["opcua_polled"]
    assert ua["controllers"] == 1
    assert_compared(
        ua["agent_cpu_ms_per_1000_polls"], ua["bare_cpu_ms_per_1000_polls"], ua["cpu_per_poll_ratio"]
    )
    assert ua["agent_polls_per_s"] > 0 and ua["bare_polls_per_s"] > 0


def test_replay_http_drain_compares_with_a_bare_post_loop() -> None:
    got = run_bench("replay.py", "--events", "200", "--sinks", "http", "--rounds", "2")
    assert got["bench"] == "replay" and got["events"] == 200 and got["rounds"] == 2
    assert "mqtt" not in got
    http = got["http"]
    assert (http["read_size"], http["batch_size"]) == (4000, 500)  # the defaults a user gets
    assert len(http["agent_rounds_per_s"]) == len(http["bare_rounds_per_s"]) == 2
    assert_compared(http["events_per_s"], http["bare_least_outbox_per_s"], http["ratio_vs_bare"])
    assert http["bare_post_only_per_s"] > 0


@pytest.mark.broker
@pytest.mark.skipif(
    mosquitto_binary() is None and not listening(1883),
    reason="no mosquitto and no MQTT broker on 127.0.0.1:1883: the MQTT drains of replay.py are not smoked",
)
@pytest.mark.parametrize("drain", ["mqtt", "mqtt_receipts"])
def test_replay_mqtt_drains_compare_with_a_bare_publish_loop(drain: str) -> None:
    """The plain drain, and the receipts drain (which ends when every row is confirmed)."""
    got = run_bench("replay.py", "--events", "200", "--sinks", drain, "--rounds", "2")
    assert got["bench"] == "replay" and got["events"] == 200
    assert set(got) & {"mqtt", "mqtt_receipts", "http"} == {drain}
    mqtt = got[drain]
    assert (mqtt["read_size"], mqtt["batch_size"], mqtt["max_inflight"]) == (500, 1, 100)
    assert_compared(mqtt["events_per_s"], mqtt["bare_aiomqtt_per_s"], mqtt["ratio_vs_bare"])
    assert mqtt["minutes_for_10m_events"] > 0


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


def test_ledger_years_of_a_small_fill_compares_a_full_ledger_with_an_empty_one_beside_the_prune() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster

    if pgcluster.find_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    got = run_bench(
        "ledger_years.py", "--arrivals", "20000", "--lines", "400", "--rounds", "1", "--old", "20"
    )
    assert got["bench"] == "ledger_years" and got["arrivals"] == 20000
    for phase in ("before_the_prune", "beside_the_prune", "after_the_prune"):
        p = got[phase]
        assert_compared(p["full_lines_per_s"], p["empty_lines_per_s"], p["full_vs_empty"])
    assert got["full_vs_empty_beside_the_prune"] == got["beside_the_prune"]["full_vs_empty"]
    # Whole monthly partitions of arrivals archived and dropped; payloads cleared row by row.
    assert (
        got["prune"]["arrival_partitions"]["dropped"] > 0 and got["prune"]["canonical_payload"]["pruned"] > 0
    )
    # A pruned event's re-delivery meets its first decision through the compact identity.
    assert got["pruned_redeliveries_decided"] == {"duplicate": 20, "conflict": 20}


def test_ledger_partition_count_and_migration_of_a_few_rows() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster

    if pgcluster.find_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    got = run_bench("ledger_partition_count.py", "--counts", "0,3", "--batches", "2", "--batch", "50")
    assert got["bench"] == "ledger_partition_count" and [r["partitions"] for r in got["runs"]] == [0, 3]
    for r in got["runs"]:
        assert r["arrivals_per_s"] > 0
        assert r["vs_unpartitioned"] == pytest.approx(
            r["arrivals_per_s"] / got["runs"][0]["arrivals_per_s"], abs=1e-3
        )
    got = run_bench("ledger_partition_migration.py", "--events", "300", "--layouts", "plain")
    assert got["bench"] == "ledger_partition_migration" and len(got["runs"]) == 1


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


def test_ledger_import_compares_whole_processes_with_a_lean_set_based_arbiter() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster

    if pgcluster.find_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    got = run_bench("ledger_import.py", "-n", "400", "--rounds", "1")
    assert got["bench"] == "ledger_import" and got["deliveries"] == 400
    for dup in (0, 50):
        assert_compared(
            got[f"ledger_dup{dup}_per_s"], got[f"lean_dup{dup}_per_s"], got[f"ledger_vs_lean_dup{dup}"]
        )
        assert got[f"ledger_dup{dup}_client_cpu_us"] > 0 and got[f"lean_dup{dup}_client_cpu_us"] > 0
    # Both decided every line alike (the bench exits non-zero otherwise), re-deliveries written
    # otherwise (keys reordered, 4.0 for 4, another offset) being duplicates.
    assert got["decisions_checked"] == {
        "dup0": {"inserted": 400},
        "dup50": {"inserted": 200, "duplicate": 200},
    }


def test_ledger_mqtt_quick_compares_the_intake_with_a_lean_arbiter_subscribed_alike() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster
    from mosquitto import MOSQUITTO

    if pgcluster.find_binaries() is None or MOSQUITTO is None:
        pytest.skip("needs PostgreSQL server binaries (initdb, pg_ctl) and mosquitto")
    got = run_bench("ledger_mqtt.py", "--quick")
    assert got["bench"] == "ledger_mqtt" and got["messages"] == 200 and got["rounds"] == 1
    for dup in (0, 50):
        assert_compared(
            got[f"ledger_dup{dup}_msgs_per_s"],
            got[f"lean_dup{dup}_msgs_per_s"],
            got[f"ledger_vs_lean_dup{dup}"],
        )
        assert got[f"ledger_dup{dup}_client_cpu_us"] > 0 and got[f"lean_dup{dup}_client_cpu_us"] > 0
        assert got[f"cpu_lean_vs_ledger_dup{dup}"] == pytest.approx(
            got[f"lean_dup{dup}_client_cpu_us"] / got[f"ledger_dup{dup}_client_cpu_us"], rel=0.02
        )
    # Both sides decided every message alike (the bench exits non-zero otherwise); re-deliveries
    # written by a second gateway (keys reordered, 4.0 for 4, another offset) are duplicates.
    assert got["decisions_checked"] == {
        "dup0": {"inserted": 200},
        "dup50": {"inserted": 100, "duplicate": 100},
    }
    assert len(got["loadavg_before"]) == len(got["loadavg_after"]) == 3


def _opcua_subscribe_smoke(server: str) -> dict[str, Any]:
    got = run_bench(
        "opcua_subscribe.py", "--server", server, "--transitions", "300", "--rounds", "1", "--settle", "3"
    )
    assert got["bench"] == "opcua_subscribe" and got["server"] == server
    if "skipped" in got:
        pytest.skip(f"bench/opcua_subscribe.py --server {server}: {got['skipped']}")
    assert got["transitions"] == 300 and got["rounds"] == 1
    assert len(got["agent_rounds_per_s"]) == len(got["bare_rounds_per_s"]) == 1
    assert_compared(got["agent_per_s"], got["bare_per_s"], got["ratio"])
    assert got["server_emit_per_s"] > 0 and got["rss_peak_mb"] > 0
    # Every transition made reached the store, or the store names it in a gap: none lost silently.
    assert got["agent_lost"] == got["agent_lost_named_by_gaps"]
    return got


def test_opcua_subscribe_of_a_few_transitions_compares_with_a_bare_asyncua_client() -> None:
    _opcua_subscribe_smoke("asyncua")


def test_opcua_subscribe_against_node_opcua_runs_or_says_why_not() -> None:
    # node and peers/node's node-opcua-server are optional: without them the bench says so and exits 0.
    _opcua_subscribe_smoke("node-opcua")


def test_web_quick_times_each_page_beside_its_bare_query() -> None:
    pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "ledger"))
    import pgcluster

    if pgcluster.find_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    got = run_bench("web.py", "--quick")
    assert got["bench"] == "web" and got["events"] == 5_000
    assert set(got["pages"]) >= {"overview", "events", "event", "conflicts_open", "pending_open", "timeline"}
    for name, page in got["pages"].items():
        assert page["requests"] == 10, name
        assert page["bare_p50_ms"] > 0 and 0 < page["page_p50_ms"] <= page["page_p95_ms"], name
        assert page["page_vs_bare_p50"] > 0, name
    assert got["max_page_p95_ms"] == max(p["page_p95_ms"] for p in got["pages"].values())


def test_ledger_failover_quick_loses_nothing_through_one_failover() -> None:
    got = run_bench("ledger_failover.py", "--quick")
    assert got["bench"] == "ledger_failover" and got["standby"] == "sync" and got["failovers"] == 1
    assert got["lost"] == 0 and got["lost_deliveries"] == {"gw-mqtt": 0, "gw-http": 0}
    assert got["arrivals_per_key"] == {"2": got["events"]} and got["deliveries_with_two_arrivals"] == 0


def test_ledger_fleet_quick_compares_sync_with_nosync_and_loses_nothing() -> None:
    got = run_bench("ledger_fleet.py", "--quick")
    assert got["bench"] == "ledger_fleet" and got["lost"] == 0
    assert got["x2_sync_canonicals_ok"] and got["x2_nosync_canonicals_ok"]
    assert_compared(got["x2_sync_arrivals_per_s"], got["x2_nosync_arrivals_per_s"], got["x2_sync_vs_nosync"])


@pytest.mark.skipif(
    shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists(),
    reason="mosquitto is not installed: bench/sparkplug.py starts its own broker",
)
def test_sparkplug_drain_compares_with_a_bare_qos0_publisher() -> None:
    got = run_bench("sparkplug.py", "--events", "300", "--rounds", "2")
    assert got["bench"] == "sparkplug" and got["events"] == 300
    assert_compared(got["events_per_s"], got["bare_aiomqtt_qos0_per_s"], got["ratio_vs_bare"])
    assert got["rss_peak_mb"] > 0 and len(got["loadavg"]) == 3


def test_sparkplug_codec_compares_the_protobuf_runtime_with_the_hand_written_codec() -> None:
    got = run_bench("sparkplug_codec.py", "--quick", "--rounds", "2")
    assert got["bench"] == "sparkplug_codec" and got["rows"] == 2000 and got["rounds"] == 2
    assert got["same_bytes_and_answers"] is True  # checked before any clock: the same work on both sides
    for kind in ("ddata", "birth", "ncmd"):
        assert_compared(got[f"{kind}_per_s"], got[f"hand_{kind}_per_s"], got[f"{kind}_vs_hand"])
    assert got["backend"] in ("upb", "cpp", "python") and got["ddata_bytes_median"] > 0


@pytest.mark.skipif(
    mosquitto_binary() is None, reason="mosquitto is not installed: bench/flash.py starts its own broker"
)
def test_flash_compares_bytes_written_per_event_with_a_lean_recorder() -> None:
    # In /var/tmp (the bench's default, removed after): a disk, where tmpfs would count nothing.
    got = run_bench(
        "flash.py",
        *("--plcs", "2", "--rate", "10", "--seconds", "3", "--warm-up", "3", "--rounds", "1"),
        *("--intervals", "50ms", "--idle-seconds", "2"),
    )
    assert got["bench"] == "flash" and got["rounds"] == 1
    figures = got["50ms"]
    for side in ("agent", "lean", "lean_same_pages"):
        assert figures[side]["events_per_s"] > 0, figures
    assert_compared(figures["agent"]["kib_per_event"], figures["lean"]["kib_per_event"], figures["ratio"])
    assert_compared(
        figures["agent"]["kib_per_event"],
        figures["lean_same_pages"]["kib_per_event"],
        figures["ratio_same_pages"],
    )
    assert got["idle_bytes_per_s"] >= 0


def test_gateway_scale_smoke_runs_the_agent_as_a_process_on_both_sides() -> None:
    got = run_bench("gateway_scale.py", "--slow", "12", "--fast", "3", "--seconds", "3", "--rounds", "1")
    assert got["bench"] == "gateway_scale" and got["exits"] == [0]
    for side in ("fleet", "base"):
        assert got[side]["polls_per_s"] > 0 and got[side]["startup_s"] > 0 and got[side]["rss_peak_mb"] > 0
    assert got["fleet"]["polls_per_s"] > got["base"]["polls_per_s"]  # the slow twelve add about 12 a second
    assert set(got["targets"]) == {
        "missed_pct_le_0.5",
        "rss_le_120mb",
        "startup_lt_10s",
        "stop_within_budget",
    }


def test_walk_shows_one_writer_of_a_record_s_event_for_every_upstream() -> None:
    """bench/walk.py: a boot's event is written by core/record_event.py for every upstream, and
    the Sparkplug walks never enter sinks/ (no CloudEvent encoded and parsed back, issue 37)."""
    got = run_bench("walk.py")
    assert got["bench"] == "walk"
    for upstream in ("mqtt", "http", "sparkplug"):
        for record in ("transition", "boot"):
            walk = got[upstream][record]
            assert walk["modules"] == len(walk["walk"]) and walk["climbs"] == len(walk["climbs_back"])
            assert walk["climbs"] <= walk["returns"]
        assert "core/record_event.py" in got[upstream]["boot"]["walk"]
    for record in ("transition", "boot"):
        assert not [m for m in got["sparkplug"][record]["walk"] if m.startswith("sinks/")]
        assert "core/record_event.py" in got["sparkplug"][record]["walk"]


def test_modbus_client_cpu_compares_our_tcp_client_with_pymodbus_per_request() -> None:
    got = run_bench("modbus_client_cpu.py", "--n", "2", "--seconds", "0.5", "--rounds", "1")
    assert got["bench"] == "modbus_client_cpu" and got["rounds"] == 1
    assert_compared(
        got["own_cpu_us_per_request"], got["pymodbus_cpu_us_per_request"], got["own_over_pymodbus"]
    )

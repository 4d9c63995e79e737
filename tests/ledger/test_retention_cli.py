"""`retention:` in ledger.yaml (every problem with file:line), `edge-agent ledger prune [--dry-run]`,
`ledger archive verify` and `ledger check` as real processes, and `ledger run`'s prune schedule."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_ledger_cli import ledger
from test_retention_prune import line, record

from agent.ledger import config
from agent.ledger.prune_schedule import prune_every
from agent.ledger.retention_config import DAY, YEAR

HTTP = "http: {listen: '127.0.0.1:1'}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "retention:\n  arrivals: 90d\n", ":3: retention.archive_dir: missing", id="no archive_dir"
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  arrivals: 90 days\n",
            ":4: retention.arrivals: '90 days' is not a duration",
            id="a bad duration",
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  canonical_payloads: 3y\n  identity_horizon: 2y\n",
            ":5: retention.identity_horizon: must be at least as long as canonical_payloads",
            id="the horizon shorter than a period",
        ),
        pytest.param(
            "retention:\n  archive_dir: relative/dir\n",
            ":3: retention.archive_dir: 'relative/dir' must be an absolute path",
            id="a relative archive_dir",
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  keep: 1d\n", ":4: retention.keep: unknown key", id="misspelt"
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  database_budget: lots\n",
            ":4: retention.database_budget: size 'lots' is not understood",
            id="a bad budget",
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  every: 0s\n", ":4: retention.every: must be longer", id="0s"
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  duty: 0\n",
            ":4: retention.duty: 0 must be between 0.01 and 1",
            id="duty 0",
        ),
        pytest.param(
            "retention:\n  archive_dir: /a\n  duty: half\n",
            ":4: retention.duty: 'half' is not a number",
            id="duty not a number",
        ),
    ],
)
def test_retention_errors_name_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(HTTP + text)  # the http line first: `retention:` is line 2
    with pytest.raises(config.ConfigProblems) as info:
        config.load(f)
    assert expected in str(info.value) and str(f) in str(info.value)


def test_retention_defaults_and_years(tmp_path: Path) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(HTTP + "retention:\n  archive_dir: /var/lib/edge-ledger/archive\n  identity_horizon: 7y\n")
    r = config.load(f).retention
    assert r is not None and r.identity_horizon_s == 7 * YEAR and r.arrivals_s == 90 * DAY
    assert r.notifications_s == 30 * DAY and r.canonical_payloads_s == 365 * DAY and r.every_s == 3600
    assert r.database_budget == 0  # none stated: the room alert stays quiet
    assert r.duty == 0.5  # the prune works at most half the time


def write_config(tmp_path: Path) -> Path:
    f = tmp_path / "ledger.yaml"
    f.write_text(
        HTTP + f"retention:\n  archive_dir: {tmp_path / 'archive'}\n  arrivals: 1d\n  notifications: 1d\n"
        "  canonical_payloads: 1d\n  reviewed: 1d\n  identity_horizon: 5y\n  database_budget: 2GB\n"
    )
    return f


async def backdate(dsn: str) -> None:
    """Every row written two days before now (the prune's periods are a day)."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("UPDATE arrival SET received_at = received_at - interval '2 days'")
        await conn.execute("UPDATE canonical_event SET created_at = created_at - interval '2 days'")


def test_prune_with_a_bad_configuration_says_file_and_line_and_exits_78(tmp_path: Path) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(f"retention:\n  archive_dir: {tmp_path}\n")  # no intake: the file is invalid
    bad = ledger("host=127.0.0.1 port=1", "prune", "-c", str(f), check=False)
    assert bad.returncode == 78, bad.stderr
    assert f"{f}:1: neither `mqtt` nor `http` intake is configured" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_prune_dry_run_then_prune_then_verify_and_check_as_processes(
    ledger_dsn: str, tmp_path: Path
) -> None:
    from agent.ledger.connection import connect

    conn = await connect(ledger_dsn)
    try:
        await record(conn, [line("T1"), line("T2"), line("T1", 7)])
    finally:
        await conn.close()
    await backdate(ledger_dsn)
    cfg = str(write_config(tmp_path))
    dry = ledger(ledger_dsn, "prune", "-c", cfg, "--dry-run")
    assert "nothing written, nothing deleted" in dry.stdout
    assert "arrival             1 rows would go" in dry.stdout and "(arrivals: 1d)" in dry.stdout
    assert not (tmp_path / "archive").exists()
    done: dict[str, Any] = json.loads(ledger(ledger_dsn, "prune", "-c", cfg, "--json").stdout)
    pruned = {s["table"]: s["pruned"] for s in done["steps"]}
    assert pruned["arrival"] == 1 and pruned["canonical_payload"] == 1 and pruned["canonical_identity"] == 0
    verified = ledger(ledger_dsn, "archive", "verify", str(tmp_path / "archive"))
    assert "2 of 2 archive files verify" in verified.stdout
    check = ledger(ledger_dsn, "check")
    assert "retention: last prune run 1 done" in check.stdout
    assert "of its budget 2.0 GB (" in check.stdout, check.stdout
    assert "arrival: archived 1, pruned 1" in check.stdout
    state = json.loads(ledger(ledger_dsn, "check", "--json").stdout)["retention"]
    assert (
        state["identities"] == 2 and state["identities_payload_pruned"] == 1 and state["beyond_horizon"] == 0
    )

    data = next((tmp_path / "archive" / "arrival").glob("*.jsonl.gz"))
    data.write_bytes(data.read_bytes()[:-3])
    bad = ledger(ledger_dsn, "archive", "verify", str(tmp_path / "archive"), check=False)
    assert bad.returncode == 74 and "1 of 2 archive files verify" in bad.stdout and str(data) in bad.stderr


async def test_ledger_run_prunes_on_its_schedule_and_logs_it(
    ledger_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = config.load(write_config(tmp_path), check_files=False).retention
    assert settings is not None
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(prune_every(ledger_dsn, None, settings, stop, first_after_s=0.05))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if "scheduled prune run=" in caplog.text:
            break
    stop.set()
    await asyncio.wait_for(task, 5)
    assert "scheduled prune run=1 done" in caplog.text
    async with await psycopg.AsyncConnection.connect(ledger_dsn) as conn:
        cur = await conn.execute("SELECT count(*), min(outcome) FROM retention_run")
        assert await cur.fetchone() == (1, "done"), "one run (the next one is `every` later)"


async def test_metrics_show_sizes_oldest_rows_pruned_and_beyond_horizon(
    ledger_dsn: str, tmp_path: Path
) -> None:
    from prometheus_client import generate_latest

    from agent.ledger import metrics, prune
    from agent.ledger.connection import connect

    conn = await connect(ledger_dsn)
    try:
        await record(conn, [line("T1"), line("T2"), line("T3", ts="2001-01-01T00:00:00.000Z")])
        await backdate(ledger_dsn)
        settings = config.load(write_config(tmp_path), check_files=False).retention
        assert settings is not None
        await prune.prune(conn, settings)
        await metrics.refresh(conn)
    finally:
        await conn.close()
    text = generate_latest(metrics.REGISTRY).decode()

    def value(sample: str) -> float:
        (got,) = [ln.rsplit(" ", 1)[1] for ln in text.splitlines() if ln.startswith(sample + " ")]
        return float(got)

    assert value('edge_ledger_rows_pruned{table="arrival"}') == 1
    assert value('edge_ledger_rows_archived{table="canonical_payload"}') == 2
    assert value('edge_ledger_retention_period_seconds{table="arrival"}') == 86400
    assert value('edge_ledger_oldest_row_age_seconds{table="arrival"}') == 0, "nothing prunable left"
    assert value('edge_ledger_table_bytes{table="arrival"}') > 0
    assert value("edge_ledger_database_budget_bytes") == 2e9  # as the prune ran with it
    assert 1e6 < value("edge_ledger_database_bytes") < 2e9
    assert value("edge_ledger_last_prune_ok") == 1 and value("edge_ledger_identities") == 2
    assert value('edge_ledger_beyond_horizon_arrivals{state="open"}') == 1

"""`review conflicts`, `review pending` and `review mark`: both payloads of a conflict side by side with
hashes and arrivals, identity-incomplete arrivals with their raw evidence, a note kept and nothing
deleted. The command line runs in this process on real SQLite files (closed pipes and missing stores:
real processes, in test_closed_pipe.py and test_missing_store.py)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.cli.main import cli

FIRST = {
    "source": "PUMP-07/Trip",
    "transitionId": "T91",
    "bootId": "B17",
    "sourceTimestamp": "2026-04-22T08:00:12.120Z",
    "arrivalAt": "2026-04-22T08:00:12.180Z",
    "payload": {"state": "Trip", "severity": 2},
}
SECOND = {**FIRST, "arrivalAt": "2026-04-22T08:03:00.000Z", "payload": {"state": "Trip", "severity": 3}}
REPEAT = {**FIRST, "arrivalAt": "2026-04-22T08:04:00.000Z"}
NO_BOOT = {k: v for k, v in FIRST.items() if k != "bootId"} | {"transitionId": "T92"}


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The command line in this process (click's runner); exit code, stdout and stderr as a process's."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if check and result.exit_code != 0:
        raise AssertionError(f"{args}: exit {result.exit_code}: {result.stderr}")
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    capture = tmp_path / "capture.jsonl"
    lines = [json.dumps(d).encode() for d in (FIRST, SECOND, REPEAT, NO_BOOT)]
    capture.write_bytes(b"\n".join(lines) + b"\n")
    path = tmp_path / "events.db"
    run("--db", str(path), "import", str(capture))
    return path


def decisions(db: Path) -> dict[int, str]:
    with sqlite3.connect(db) as con:
        return dict(con.execute("SELECT arrival_id, decision FROM arrivals"))


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_conflict_shows_both_payloads_with_hashes_and_arrivals(db: Path) -> None:
    assert decisions(db) == {1: "inserted", 2: "conflict", 3: "duplicate", 4: "identity_incomplete"}
    [c] = json_lines(run("--db", str(db), "review", "conflicts", "--json").stdout)
    assert (c["arrival_id"], c["canonical_id"], c["source"], c["transitionId"], c["bootId"]) == (
        2,
        1,
        "PUMP-07/Trip",
        "T91",
        "B17",
    )
    kept, other = c["canonical"], c["conflicting"]
    assert (kept["arrival_id"], kept["arrivalAt"], kept["payload"]) == (
        1,
        FIRST["arrivalAt"],
        FIRST["payload"],
    )
    assert (other["arrival_id"], other["arrivalAt"], other["payload"]) == (
        2,
        SECOND["arrivalAt"],
        SECOND["payload"],
    )
    assert len(kept["payload_hash"]) == 64 and len(other["payload_hash"]) == 64
    assert kept["payload_hash"] != other["payload_hash"]
    assert json.loads(other["raw"]) == SECOND
    assert (c["reviewed"], c["marks"]) == (False, [])
    assert c["identity_basis"] == "counter"  # the key came from the controller's counter

    text = run("--db", str(db), "review", "conflicts").stdout
    assert "1 conflict (" in text
    row = {line.split()[0]: line for line in text.splitlines()[3:] if line.startswith("  ") and line.split()}
    assert kept["payload_hash"] in row["payload_hash"] and other["payload_hash"] in row["payload_hash"]
    assert FIRST["arrivalAt"] in row["arrivalAt"] and SECOND["arrivalAt"] in row["arrivalAt"]
    assert '"severity":2' in row["payload"] and '"severity":3' in row["payload"]
    assert "basis counter" in text

    rows = list(csv.DictReader(io.StringIO(run("--db", str(db), "review", "conflicts", "--csv").stdout)))
    assert [(r["arrival_id"], r["canonical_payload_hash"], r["conflicting_payload_hash"]) for r in rows] == [
        ("2", kept["payload_hash"], other["payload_hash"])
    ]
    assert [r["identity_basis"] for r in rows] == ["counter"]


def test_pending_shows_the_raw_evidence_and_why(db: Path) -> None:
    [p] = json_lines(run("--db", str(db), "review", "pending", "--json").stdout)
    assert (p["arrival_id"], p["bootId"], p["line"]) == (4, None, 4)
    assert json.loads(p["raw"]) == NO_BOOT
    assert "missing bootId" in p["reason"]
    text = " ".join(run("--db", str(db), "review", "pending").stdout.split())
    assert "arrival 4 at 2026-04-22T08:00:12.180Z from line 4 of import:capture.jsonl" in text
    assert "why: missing bootId" in text and '"transitionId": "T92"' in text
    [row] = csv.DictReader(io.StringIO(run("--db", str(db), "review", "pending", "--csv").stdout))
    assert json.loads(row["raw"]) == NO_BOOT
    assert p["identity_basis"] == row["identity_basis"] == "counter" and "basis counter" in text


@pytest.mark.parametrize("listing", [["conflicts"], ["pending"]])
def test_marking_keeps_a_note_and_deletes_nothing(db: Path, listing: list[str]) -> None:
    arrival = 2 if listing == ["conflicts"] else 4
    with sqlite3.connect(db) as con:
        before = {
            t: con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("arrivals", "events", "pending")
        }
    first = run("--db", str(db), "review", "mark", str(arrival), "--note", "looked at it", "--by", "ana")
    assert f"arrival {arrival} (" in first.stdout and "marked reviewed" in first.stdout
    run("--db", str(db), "review", "mark", str(arrival), "--note", "firmware 2.1 resends; canonical kept")

    [rec] = json_lines(run("--db", str(db), "review", *listing, "--json").stdout)
    assert rec["reviewed"] is True
    assert [m["note"] for m in rec["marks"]] == ["looked at it", "firmware 2.1 resends; canonical kept"]
    assert rec["marks"][0]["marked_by"] == "ana"
    assert "firmware 2.1 resends; canonical kept" in " ".join(
        run("--db", str(db), "review", *listing).stdout.split()
    )
    assert run("--db", str(db), "review", *listing, "--open", "--json").stdout == ""
    with sqlite3.connect(db) as con:
        after = {
            t: con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("arrivals", "events", "pending")
        }
    assert after == before
    if listing == ["pending"]:  # still identity-incomplete where the report and `pending` show it
        assert json.loads(run("--db", str(db), "pending", "--json").stdout)["arrival_id"] == 4


@pytest.mark.parametrize(
    ("arrival", "message"),
    [("1", "arrival 1 is inserted"), ("3", "arrival 3 is duplicate"), ("99", "no arrival 99")],
)
def test_only_conflicts_and_pending_arrivals_can_be_marked(db: Path, arrival: str, message: str) -> None:
    proc = run("--db", str(db), "review", "mark", arrival, "--note", "x", check=False)
    assert proc.returncode == 2 and message in proc.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM review_marks").fetchone() == (0,)


def test_an_empty_note_is_refused(db: Path) -> None:
    proc = run("--db", str(db), "review", "mark", "2", "--note", "  ", check=False)
    assert proc.returncode == 2 and "note is empty" in proc.stderr


def test_the_report_tables_say_repeats_apart_from_the_duplicate_count(db: Path) -> None:
    out = run("--db", str(db), "report").stdout
    assert "duplicate 1 (same content), conflict 1" in out
    header = next(line for line in out.splitlines() if line.startswith("id "))
    assert "repeats" in header.split() and "conflicts" in header.split() and "dup" not in header.split()
    row = out.splitlines()[out.splitlines().index(header) + 2]
    at_repeats, at_conflicts = header.index("repeats"), header.index("conflicts")
    # one duplicate and one conflict came after the first arrival: repeats 2, of them conflicts 1
    assert row[at_repeats:at_conflicts].strip() == "2"
    assert row[at_conflicts : at_conflicts + len("conflicts")].strip() == "1"
    assert "need not add up" in " ".join(out.split())
    assert "`edge-agent review conflicts`" in out and "`edge-agent review pending`" in out

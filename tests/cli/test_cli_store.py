"""The store's command-line contract, run as real processes against real SQLite files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parents[1] / "data"
CMD = [sys.executable, "-m", "agent"]


def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


def import_json(db: Path, file: Path) -> list[dict[str, Any]]:
    out = run("--db", str(db), "import", str(file), "--json").stdout
    return [json.loads(line) for line in out.splitlines()]


def test_seed_cases_match_the_field_acceptance_data(tmp_path: Path) -> None:
    """The project's own copy of the acceptance check (tests/data/seed-cases.*)."""
    expected = json.loads((DATA / "seed-cases.expected.json").read_text())
    db = tmp_path / "store.db"
    results = {r["line"]: r for r in import_json(db, DATA / "seed-cases.jsonl")}
    report = json.loads(run("--db", str(db), "report", "--json").stdout)
    letters: dict[str, int] = {}
    for exp in expected["decisions"]:
        got = results[exp["line"]]
        assert got["decision"] == exp["decision"], exp
        letter = exp.get("canonical")
        if letter is None:
            assert got["canonical_id"] is None
        elif letter in letters:
            assert got["canonical_id"] == letters[letter]
        else:
            assert got["canonical_id"] not in letters.values()
            letters[letter] = got["canonical_id"]
        assert got["duplicate_of"] == (letters[exp["duplicate_of"]] if exp.get("duplicate_of") else None)
    for key, want in expected["summary"].items():
        assert report["summary"][key] == want, key
    events = {e["canonical_id"]: e for e in report["events"]}
    for letter, want in expected["events"].items():
        ev = events[letters[letter]]
        for key, value in want.items():
            assert ev["payload" if key == "kept_payload" else key] == value, (letter, key)
    assert set(report) >= {"summary", "events", "arrivals", "boots", "gaps", "anomalies", "pending"}
    assert [p["arrival_id"] for p in report["pending"]] == [8]


def test_bad_lines_are_rejected_with_line_and_raw_text_and_the_rest_goes_on(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_bytes(
        b'{"source":"P/T","transitionId":1,"bootId":"B1"}\n'
        b"\n"
        b"{broken\n"
        b"[1,2,3]\n"
        b'{"source":"P/T","transitionId":{"x":1},"bootId":"B1"}\n'
        b'{"source":"P/T","transitionId":2,"bootId":"B1","sourceTimestamp":"22.04.2026 08:00"}\n'
        b"\xff\xfe not utf-8\n"
        b'{"source":"P/T","transitionId":3,"bootId":"B1"}\r\n'
    )
    db = tmp_path / "s.db"
    results = import_json(db, f)
    assert [(r["line"], r["decision"]) for r in results] == [
        (1, "inserted"),
        (3, "rejected"),
        (4, "rejected"),
        (5, "rejected"),
        (6, "rejected"),
        (7, "rejected"),
        (8, "inserted"),
    ]
    assert all(r["reason"] for r in results if r["decision"] == "rejected")
    report = json.loads(run("--db", str(db), "report", "--json").stdout)
    rejected = {a["line"]: a for a in report["arrivals"] if a["decision"] == "rejected"}
    assert rejected[3]["raw"] == "{broken"
    assert "22.04.2026" in rejected[6]["raw"] and "sourceTimestamp" in rejected[6]["reason"]
    assert rejected[7]["raw"].startswith("\\xff\\xfe")
    assert report["summary"]["rejected"] == 5 and report["summary"]["arrivals"] == 7


def test_a_path_that_cannot_be_a_store_gives_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text('{"source":"P/T","transitionId":1,"bootId":"B1"}\n')
    (tmp_path / "adir").mkdir()
    proc = run("--db", str(tmp_path / "adir"), "import", str(f), "--json", check=False)
    assert proc.returncode == 74 and "cannot open" in proc.stderr and proc.stdout == ""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 200)
    proc = run("--db", str(garbage), "import", str(f), check=False)
    assert proc.returncode == 74 and "not an edge-agent store" in proc.stderr


def test_a_full_store_stops_the_import_with_a_clear_error_and_stays_consistent(tmp_path: Path) -> None:
    f = tmp_path / "big.jsonl"
    pad = "x" * 300
    with f.open("w") as out:
        for n in range(20_000):
            out.write(
                json.dumps(
                    {"source": f"P{n % 7}/T", "transitionId": n, "bootId": "B1", "payload": {"p": pad}}
                )
            )
            out.write("\n")
    db = tmp_path / "s.db"
    proc = run("--db", str(db), "--max-db-size", "2MB", "import", str(f), "--json", check=False)
    assert proc.returncode == 74, proc.stderr
    assert "full" in proc.stderr and "intact" in proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert 0 < len(printed) < 20_000
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {row[0] for row in con.execute("SELECT line FROM arrivals")}
    con.close()
    assert {r["line"] for r in printed} == stored, "every printed line is committed, and only those"
    report = json.loads(run("--db", str(db), "report", "--json").stdout)
    assert report["summary"]["arrivals"] == len(printed)


def test_two_processes_importing_one_file_make_one_canonical_per_key(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    with f.open("w") as out:
        for n in range(3000):
            out.write(json.dumps({"source": f"P{n % 5}/T", "transitionId": n, "bootId": "B1"}) + "\n")
    db = tmp_path / "s.db"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    run("--db", str(db), "import", str(empty))  # create the store first, so both only open it
    procs = [
        subprocess.Popen(
            [*CMD, "--db", str(db), "import", str(f), "--json", "--receiver", f"proc-{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    decisions = [json.loads(line)["decision"] for out, _ in outs for line in out.splitlines()]
    assert decisions.count("inserted") == 3000 and decisions.count("duplicate") == 3000
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 3000
    assert con.execute("SELECT count(*) FROM arrivals").fetchone()[0] == 6000
    assert con.execute("SELECT count(DISTINCT receiver) FROM arrivals").fetchone()[0] == 2
    assert con.execute("SELECT sum(duplicate_count) FROM events").fetchone()[0] == 3000
    con.close()


def test_tables_for_people_show_identity_and_times_side_by_side(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    run("--db", str(db), "import", str(DATA / "seed-cases.jsonl"))
    out = run("--db", str(db), "report", "--sort", "state").stdout
    header = next(line for line in out.splitlines() if line.startswith("id "))
    for col in ("source", "transitionId", "bootId", "sourceTimestamp", "first arrivalAt", "status"):
        assert col in header
    first_row = out.splitlines()[out.splitlines().index(header) + 2]
    assert "DuplicateConflict" in first_row, "sorted by state, conflicts come first"
    csv_out = run("--db", str(db), "report", "--csv").stdout.splitlines()
    assert csv_out[0].startswith("canonical_id,source,transitionId,bootId") and len(csv_out) == 9
    assert "missing bootId" in run("--db", str(db), "pending").stdout
    boots = [json.loads(line) for line in run("--db", str(db), "boots", "--json").stdout.splitlines()]
    assert {(b["device"], b["bootId"], b["previous_bootId"]) for b in boots if b["device"] == "PUMP-07"} == {
        ("PUMP-07", "B17", None),
        ("PUMP-07", "B18", "B17"),
        ("PUMP-07", "B20", "B18"),
    }


@pytest.mark.parametrize("command", [[], ["import"], ["report"], ["pending"], ["boots"]])
def test_every_command_has_help(command: list[str]) -> None:
    proc = run(*command, "--help")
    assert "Usage:" in proc.stdout and len(proc.stdout.splitlines()) > 5


def test_no_db_and_no_config_is_a_config_error(tmp_path: Path) -> None:
    proc = run("-c", str(tmp_path / "missing.yaml"), "report", check=False)
    assert proc.returncode == 78 and "--db" in proc.stderr

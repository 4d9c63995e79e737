"""`edge-agent ledger import` and `report` as real processes against a real PostgreSQL: the seed's
acceptance cases give the same decisions and report as the SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[1] / "data"
CMD = [sys.executable, "-m", "agent"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


def ledger(dsn: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("ledger", "--dsn", dsn, *args, check=check)


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_seed_cases_give_the_expected_decisions_and_report(pg_dsn: str) -> None:
    expected = json.loads((DATA / "seed-cases.expected.json").read_text())
    results = {
        r["line"]: r
        for r in lines_of(ledger(pg_dsn, "import", str(DATA / "seed-cases.jsonl"), "--json").stdout)
    }
    report = json.loads(ledger(pg_dsn, "report", "--json").stdout)
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
    assert [p["arrival_id"] for p in report["pending"]] == [8]
    assert {a["via"] for a in report["arrivals"]} == {"import"}
    assert {a["gateway"] for a in report["arrivals"]} == {"import"}
    assert all(a["received_at"] for a in report["arrivals"])
    (conflict,) = report["conflicts"]
    assert conflict["canonical"]["payload"] == {"state": "Trip", "severity": "High"}
    assert conflict["conflicting"]["payload"] == {"state": "Trip", "severity": "Low"}


# What the two reports share, field by field (the ledger adds its evidence beside them).
EVENT_FIELDS = (
    "canonical_id",
    "source",
    "transitionId",
    "bootId",
    "sourceTimestamp",
    "status",
    "payload",
    "payload_hash",
    "duplicate_count",
    "conflict_count",
    "first_arrival",
    "last_arrival",
)
ARRIVAL_FIELDS = (
    "arrival_id",
    "source",
    "transitionId",
    "bootId",
    "sourceTimestamp",
    "arrivalAt",
    "decision",
    "canonical_id",
    "duplicate_of",
    "payload_hash",
    "reason",
    "flags",
    "line",
    "raw",
)
BOOT_FIELDS = (
    "device",
    "bootId",
    "previous_bootId",
    "first_arrival",
    "sourceTimestamp",
    "live",
    "arrival_id",
)
SUMMARY_FIELDS = (
    "source_events",
    "arrivals",
    "duplicates",
    "conflicts",
    "identity_incomplete",
    "rejected",
    "boots",
    "gaps",
    "anomalies",
)


def same_as_the_store(tmp_path: Path, dsn: str, file: Path) -> None:
    db = tmp_path / "store.db"
    store_lines = lines_of(run("--db", str(db), "import", str(file), "--json").stdout)
    ledger_lines = lines_of(ledger(dsn, "import", str(file), "--json").stdout)
    assert ledger_lines == store_lines
    store = json.loads(run("--db", str(db), "report", "--json").stdout)
    led = json.loads(ledger(dsn, "report", "--json").stdout)
    assert {k: led["summary"][k] for k in SUMMARY_FIELDS} == {k: store["summary"][k] for k in SUMMARY_FIELDS}
    assert [{k: e[k] for k in EVENT_FIELDS} for e in led["events"]] == [
        {k: e[k] for k in EVENT_FIELDS} for e in store["events"]
    ]
    assert [{k: a[k] for k in ARRIVAL_FIELDS} for a in led["arrivals"]] == [
        {k: a[k] for k in ARRIVAL_FIELDS} for a in store["arrivals"]
    ]
    assert [{k: b[k] for k in BOOT_FIELDS} for b in led["boots"]] == [
        {k: b[k] for k in BOOT_FIELDS} for b in store["boots"]
    ]
    assert [p["arrival_id"] for p in led["pending"]] == [p["arrival_id"] for p in store["pending"]]


def test_the_seed_file_gives_the_same_results_and_report_as_the_sqlite_store(
    tmp_path: Path, pg_dsn: str
) -> None:
    same_as_the_store(tmp_path, pg_dsn, DATA / "seed-cases.jsonl")


def test_a_larger_file_written_as_an_outsider_gives_the_same_results_and_report_as_the_store(
    tmp_path: Path, pg_dsn: str
) -> None:
    # Six batches, more than a megabyte past the first (the store's import parses those in a
    # second process): re-deliveries written otherwise, conflicts, incomplete lines, tabs and
    # backslashes in ids (the COPY text's escapes) (a rejected line's arrivalAt is when it was
    # read: test_bad_lines_give_the_same_rejections_as_the_store).
    f = tmp_path / "big.jsonl"
    with f.open("w", encoding="utf-8") as out:
        for n in range(6000):
            k = n if n % 2 == 0 else n // 3
            ev: dict[str, Any] = {
                "source": f"KESSEL-{k % 7}/Druck" + ("\t\\x" if k % 11 == 0 else ""),
                "transitionId": f"T{k}" if n % 97 else None,
                "bootId": f"B{(k // 50) % 3}",
                "sourceTimestamp": f"2026-04-22T08:{(k // 60) % 60:02d}:{k % 60:02d}.{k % 1000:03d}Z",
                "arrivalAt": "2026-04-22T09:00:00.000Z",
                "payload": {"level": 20.0 + k / 8, "state": "Überdruck", "n": k + (n % 89 == 1)},
                "padding": "x" * 60,
            }
            if n % 2:
                ev["sourceTimestamp"] = ev["sourceTimestamp"].replace("T08:", "T10:").replace("Z", "+02:00")
                ev["payload"] = dict(reversed(ev["payload"].items()))
            out.write(json.dumps(ev, ensure_ascii=n % 3 == 0) + "\n")
    assert f.stat().st_size > 1.5 * (1 << 20)
    same_as_the_store(tmp_path, pg_dsn, f)


def test_bad_lines_give_the_same_rejections_as_the_store(tmp_path: Path, pg_dsn: str) -> None:
    f = tmp_path / "in.jsonl"
    f.write_bytes(
        b'{"source":"P/T","transitionId":1,"bootId":"B1","arrivalAt":"2026-04-22T08:00:00Z"}\n'
        b"\n"
        b"{broken\n"
        b"[1,2,3]\n"
        b'{"source":"P/T","transitionId":{"x":1},"bootId":"B1"}\n'
        b'{"source":"P/T","transitionId":2,"bootId":"B1","sourceTimestamp":"22.04.2026 08:00"}\n'
        b"\xff\xfe not utf-8\n"
        b'{"source":"P/T","transitionId":3,"bootId":"B1","arrivalAt":"2026-04-22T08:00:01Z"}\r\n'
    )
    db = tmp_path / "store.db"
    assert lines_of(ledger(pg_dsn, "import", str(f), "--json").stdout) == lines_of(
        run("--db", str(db), "import", str(f), "--json").stdout
    )
    led = json.loads(ledger(pg_dsn, "report", "--json").stdout)
    rejected = {a["line"]: a for a in led["arrivals"] if a["decision"] == "rejected"}
    assert rejected[3]["raw"] == "{broken"
    assert rejected[7]["raw"].startswith("\\xff\\xfe")


def test_a_lines_gateway_field_names_the_gateway(tmp_path: Path, pg_dsn: str) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text(
        '{"source":"P/T","transitionId":1,"bootId":"B1","gateway":"gw-a"}\n'
        '{"source":"P/T","transitionId":1,"bootId":"B1","gateway":"gw-b"}\n'
        '{"source":"P/T","transitionId":1,"bootId":"B1"}\n'
    )
    ledger(pg_dsn, "import", str(f), "--gateway", "line-7")
    led = json.loads(ledger(pg_dsn, "report", "--json").stdout)
    assert [a["gateway"] for a in led["arrivals"]] == ["gw-a", "gw-b", "line-7"]
    assert [a["decision"] for a in led["arrivals"]] == ["inserted", "duplicate", "duplicate"]
    assert led["events"][0]["first_gateway"] == "gw-a"


def test_without_postgresql_the_import_fails_clearly_and_prints_nothing(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text('{"source":"P/T","transitionId":1,"bootId":"B1"}\n')
    proc = ledger(
        "host=127.0.0.1 port=1 dbname=x user=x connect_timeout=2", "import", str(f), "--json", check=False
    )
    assert proc.returncode == 69 and "cannot connect" in proc.stderr and proc.stdout == ""


def test_report_on_an_unmigrated_database_says_to_migrate(pg_dsn: str) -> None:
    proc = ledger(pg_dsn, "report", "--json", check=False)
    assert proc.returncode == 74 and "edge-agent ledger migrate" in proc.stderr
    assert ledger(pg_dsn, "check", check=False).returncode == 74
    assert "migrated to version" in ledger(pg_dsn, "migrate").stdout
    assert "is at version" in ledger(pg_dsn, "check").stdout
    assert "nothing to do" in ledger(pg_dsn, "migrate").stdout
    assert json.loads(ledger(pg_dsn, "report", "--json").stdout)["summary"]["arrivals"] == 0


def test_the_report_for_people_shows_conflicts_with_both_originals_boots_and_pending(pg_dsn: str) -> None:
    ledger(pg_dsn, "import", str(DATA / "seed-cases.jsonl"))
    out = ledger(pg_dsn, "report").stdout
    lines = out.splitlines()
    assert "open conflicts:            1" in lines
    conflict = lines.index(
        "conflict arrival 7: PUMP-08/Trip  transitionId T40  bootId B5  (canonical event 5)"
    )
    payload = next(line for line in lines[conflict:] if line.strip().startswith("payload "))
    assert '{"severity":"High","state":"Trip"}' in payload and '{"severity":"Low","state":"Trip"}' in payload
    boots = lines.index("boots observed:")
    assert sum(1 for line in lines[boots + 3 : boots + 10] if "bootId first seen" in line) == 7
    pending = lines.index("pending (identity-incomplete arrivals waiting for a person):")
    assert "missing bootId" in lines[pending + 3]
    event_1 = next(line for line in lines if line.startswith("1 ") and "T91" in line)
    assert event_1.split()[7:9] == ["2", "import"], "arrivals and gateways of the event"
    limited = ledger(pg_dsn, "report", "--limit", "3").stdout
    assert "... 5 more (use --limit 0 or --json)" in limited

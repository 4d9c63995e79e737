"""CSV cells that would start a formula in a spreadsheet (issue 36, OWASP "CSV injection"): the
pure rule, the review page's export, and `edge-agent report --csv` on a real store."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.core.spreadsheet import safe_cell
from agent.ledger.web.common import export


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
        ("+1+1", "'+1+1"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tcmd", "'\tcmd"),
        ("\rcmd", "'\rcmd"),
        ("PUMP-07/Trip", "PUMP-07/Trip"),
        ("a=b", "a=b"),
        ("", ""),
        (-5, -5),
        (2.5, 2.5),
        (True, True),
        (None, None),
    ],
)
def test_text_that_would_start_a_formula_gets_a_leading_quote(value: object, written: object) -> None:
    assert safe_cell(value) == written


def test_the_review_pages_csv_export_is_safe_and_its_json_exact() -> None:
    rows = [{"gateway": "=cmd|' /C calc'!A0", "transition_id": "-1", "n": -1, "payload": {"s": "=x"}}]
    table = list(csv.reader(io.StringIO(export(rows, "csv", "t").text or "")))
    assert table[1] == ["'=cmd|' /C calc'!A0", "'-1", "-1", '{"s": "=x"}']
    assert json.loads(export(rows, "json", "t").text or "") == rows


def test_report_csv_of_a_store_writes_a_hostile_transition_id_as_text(tmp_path: Path) -> None:
    line = {
        "source": "PUMP-07/Trip",
        "transitionId": "=1+1",
        "bootId": "@B17",
        "sourceTimestamp": "2026-04-22T08:00:00.000Z",
        "arrivalAt": "2026-04-22T08:00:00.100Z",
        "payload": {"state": "Trip"},
    }
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    cmd = [sys.executable, "-m", "agent", "--db", str(tmp_path / "s.db")]
    subprocess.run([*cmd, "import", str(tmp_path / "in.jsonl")], check=True, capture_output=True, timeout=120)
    out = subprocess.run(
        [*cmd, "report", "--csv"], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    (row,) = list(csv.DictReader(io.StringIO(out)))
    cells = set(row.values())
    assert "'=1+1" in cells and "'@B17" in cells
    assert not any(v.startswith(("=", "+", "@")) for v in cells)

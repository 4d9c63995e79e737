"""`ledger report --json` reads its rows by column name (agent/ledger/report.py): every section
keeps its keys, in their order, and each value its form (timestamps as RFC 3339 text, JSON
columns parsed, `duplicate_of` only on a duplicate or a conflict)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

DATA = Path(__file__).parents[1] / "data"
CMD = [sys.executable, "-m", "agent", "ledger"]

ARRIVAL = [
    "arrival_id", "source", "transitionId", "bootId", "sourceTimestamp", "arrivalAt", "decision",
    "canonical_id", "duplicate_of", "payload_hash", "reason", "flags", "gateway", "via",
    "received_at", "attempt", "replayed", "line", "kind", "ce_id", "raw",
]  # fmt: skip
ANOMALY = ["source", "bootId", "kind", "from", "to", "detected_at", "evidence"]
KEYS = {
    "events": [
        "canonical_id", "source", "transitionId", "bootId", "sourceTimestamp", "status", "payload",
        "payload_hash", "duplicate_count", "conflict_count", "first_arrival", "last_arrival",
        "first_gateway", "arrivals", "gateways",
    ],
    "arrivals": ARRIVAL,
    "pending": ARRIVAL,
    "boots": [
        "device", "bootId", "previous_bootId", "first_arrival", "sourceTimestamp", "live", "evidence", "arrival_id"
    ],
    "gaps": ANOMALY,
    "anomalies": ANOMALY,
    "conflicts": [
        "arrival_id", "canonical_id", "source", "transitionId", "bootId", "canonical", "conflicting", "gateway"
    ],
}  # fmt: skip
SIDE = ["payload", "payload_hash", "sourceTimestamp", "gateway", "arrivalAt"]


def test_every_section_keeps_its_keys_in_order_and_its_values_their_form(pg_dsn: str) -> None:
    subprocess.run(
        [*CMD, "--dsn", pg_dsn, "import", str(DATA / "seed-cases.jsonl")], check=True, capture_output=True
    )
    with psycopg.connect(pg_dsn) as c:
        c.execute(
            "INSERT INTO boot (device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence)"
            " VALUES ('P/D', 'B2', 'B1', '2026-04-22T08:00:00Z', NULL, true, '{\"a\": 1}')"
        )
        c.execute(
            "INSERT INTO anomaly (source, ce_id, boot_id, kind, from_value, to_value, detected_at, evidence)"
            " VALUES ('P/T', 'x', 'B1', 'gap', '3', '7', '2026-04-22T08:00:00.5Z', '{\"g\": 1}'),"
            " ('P/T', 'y', 'B1', 'wrap', '9', '1', '2026-04-22T08:00:02Z', '[1]')"
        )
    out = subprocess.run(
        [*CMD, "--dsn", pg_dsn, "report", "--json"], check=True, capture_output=True, text=True
    )
    report = json.loads(out.stdout)
    for section, keys in KEYS.items():
        assert report[section], section
        assert all(list(row) == keys for row in report[section]), section
    (conflict,) = report["conflicts"]
    assert list(conflict["canonical"]) == SIDE and list(conflict["conflicting"]) == SIDE
    assert [b for b in report["boots"] if b["device"] == "P/D"] == [
        {
            "device": "P/D",
            "bootId": "B2",
            "previous_bootId": "B1",
            "first_arrival": "2026-04-22T08:00:00.000Z",
            "sourceTimestamp": None,
            "live": True,
            "evidence": {"a": 1},
            "arrival_id": None,
        }
    ]
    assert report["gaps"] == [
        {
            "source": "P/T",
            "bootId": "B1",
            "kind": "gap",
            "from": "3",
            "to": "7",
            "detected_at": "2026-04-22T08:00:00.500Z",
            "evidence": {"g": 1},
        }
    ]
    for a in report["arrivals"]:
        kept = a["decision"] in ("duplicate", "conflict")
        assert a["duplicate_of"] == (a["canonical_id"] if kept else None), a
        assert isinstance(a["flags"], list) and isinstance(a["raw"], str)
    assert any(a["duplicate_of"] is not None for a in report["arrivals"])
    for e in report["events"]:
        assert e["arrivals"] == e["duplicate_count"] + 1 and isinstance(e["gateways"], list)
        assert e["status"] in ("Canonical", "DuplicateConflict")

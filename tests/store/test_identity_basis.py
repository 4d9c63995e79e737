"""The identity basis (counter, event_id, window) is stored, reported and sent upstream (issue item 4).

Real SQLite files; the report is read through the command line, as an operator reads it.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from agent.core.basis import WINDOW_KEY, IdentityBasis
from agent.core.contract import Delivery
from agent.core.records import IdentityIncomplete, Transition
from agent.core.snapshot import make_delivery
from agent.sinks.encode import encode
from agent.store.schema import IDENTITY_BASIS_MIGRATION, MIGRATIONS
from agent.store.store import Store

AT = "2026-04-22T08:00:10.050Z"


def poll(channel: str, tid: str, boot: str | None, basis: str) -> Delivery:
    return make_delivery(
        device="PUMP-07",
        channel=channel,
        transition_id=tid,
        boot_id=boot,
        state="On",
        source_timestamp=None,
        latched={},
        arrival_at=AT,
        receiver="modbus:test",
        live=True,
        raw={},
        basis=basis,
    )


ITEMS = [
    poll("Trip", "91", "B17", IdentityBasis.COUNTER),
    poll("HighTemp", "0a1b2c", "2026-04-22T07:00:00.000Z", IdentityBasis.EVENT_ID),
    poll("Coil", "w:On:29614080", "B17", IdentityBasis.WINDOW),
    poll("Coil", "w:On:29614080", None, IdentityBasis.WINDOW),
]


def cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_report_json_csv_and_tables_show_each_events_basis_and_the_window_flag(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with await Store.open(db) as store:
        await store.record(ITEMS)
    doc = json.loads(cli("--db", str(db), "report", "--json"))
    by_tid = {e["transitionId"]: e for e in doc["events"]}
    assert {t: (e["identity_basis"], e["flags"]) for t, e in by_tid.items()} == {
        "91": ("counter", []),
        "0a1b2c": ("event_id", []),
        "w:On:29614080": ("window", [WINDOW_KEY]),
    }
    assert [(a["identity_basis"], a["flags"]) for a in doc["arrivals"]] == [
        ("counter", []),
        ("event_id", []),
        ("window", [WINDOW_KEY]),
        ("window", [WINDOW_KEY]),
    ]
    assert [(p["identity_basis"], p["flags"]) for p in doc["pending"]] == [("window", [WINDOW_KEY])]
    rows = list(csv.DictReader(io.StringIO(cli("--db", str(db), "report", "--csv"))))
    assert {r["transitionId"]: r["identity_basis"] for r in rows} == {
        "91": "counter",
        "0a1b2c": "event_id",
        "w:On:29614080": "window",
    }
    table = cli("--db", str(db), "report").splitlines()
    header = next(line for line in table if line.startswith("id "))
    assert "basis" in header.split()
    coil = next(line for line in table if "w:On:29614080" in line)
    assert " window " in coil


async def test_the_outbox_hands_the_sinks_the_basis_and_the_event_says_it(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        await store.register_upstreams([("central", "none")], AT)
        await store.record(ITEMS)
        entries = await store.outbox.claim("central", 10)
    records = [e.record for e in entries]
    assert [
        (type(r).__name__, r.basis) for r in records if isinstance(r, Transition | IdentityIncomplete)
    ] == [
        ("Transition", "counter"),
        ("Transition", "event_id"),
        ("Transition", "window"),
        ("IdentityIncomplete", "window"),
    ]
    bodies = [
        json.loads(encode(e, site="plant-1", gateway="gw", replayed=False, store_id=store.store_id).body)
        for e in entries
    ]
    assert [b["identitybasis"] for b in bodies if "identitybasis" in b] == [
        "counter",
        "event_id",
        "window",
        "window",
    ]


async def test_events_stored_before_the_basis_existed_read_as_counter(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    before = MIGRATIONS[: MIGRATIONS.index(IDENTITY_BASIS_MIGRATION)]
    await (await Store.open(db, migrations=before)).close()
    con = sqlite3.connect(db)
    con.execute(
        "INSERT INTO events(source, transition_id, boot_id, device, payload, payload_hash,"
        " first_arrival, last_arrival, first_arrival_id) VALUES ('P/T', '1', 'B', 'P', '{}', 'h', ?, ?, 1)",
        (AT, AT),
    )
    con.commit()
    con.close()
    await (await Store.open(db)).close()
    con = sqlite3.connect(db)
    assert con.execute("SELECT identity_basis FROM events").fetchall() == [("counter",)]
    con.close()

"""The alarms migration: `arrivals.via` and the `absent_at_refresh` anomaly kind on a store
that already holds anomalies (their ids survive: outbox rows refer to them)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agent.core.contract import Anomaly
from agent.store.schema import ALARMS_MIGRATION, MIGRATIONS
from agent.store.store import Store

GAP = Anomaly("PUMP-07/Trip", "17", "gap", "3", "5", "2026-04-22T08:00:00.000Z", {"receiver": "x"})
ABSENT = Anomaly("PLC/HighTemp", "g1", "absent_at_refresh", "0a", "t", "2026-04-22T08:00:01.000Z")


async def test_anomalies_keep_their_ids_and_the_new_kind_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    before = MIGRATIONS[: MIGRATIONS.index(ALARMS_MIGRATION)]  # the store as it was before alarms
    store = await Store.open(path, migrations=before)
    await store.record([], anomalies=[GAP])
    await store.close()
    con = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        con.execute(
            "INSERT INTO anomalies(source, boot_id, kind, from_value, to_value, detected_at)"
            " VALUES ('s','b','absent_at_refresh','a','b','t')"
        )
    old_ids = con.execute("SELECT anomaly_id, kind FROM anomalies").fetchall()
    con.close()
    store = await Store.open(path)
    await store.record([], anomalies=[ABSENT])
    await store.close()
    con = sqlite3.connect(path)
    rows = con.execute("SELECT anomaly_id, kind FROM anomalies ORDER BY anomaly_id").fetchall()
    assert rows[: len(old_ids)] == old_ids and rows[-1][1] == "absent_at_refresh"
    assert "via" in [r[1] for r in con.execute("PRAGMA table_info(arrivals)")]
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        con.execute(
            "INSERT INTO arrivals(arrival_at, receiver, decision, raw, via) VALUES ('t','r','rejected','x','sideways')"
        )
    con.close()

"""The store id (contract section 4): a UUID made with the store file, kept inside it, and the
first half of every identity-incomplete record's id upstream."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from agent.core.contract import Rejection
from agent.core.intake import parse_delivery
from agent.sinks.encode import encode
from agent.store.schema import MIGRATIONS, STORE_ID_MIGRATION
from agent.store.store import Store

NOW = "2026-04-22T08:00:00.000Z"


async def _store_id(path: Path) -> str:
    store = await Store.open(path)
    try:
        return store.store_id
    finally:
        await store.close()


async def test_a_new_store_gets_a_random_uuid_that_it_keeps_across_reopening(tmp_path: Path) -> None:
    first = await _store_id(tmp_path / "a.db")
    assert uuid.UUID(first).version == 4 and str(uuid.UUID(first)) == first
    assert await _store_id(tmp_path / "a.db") == first
    assert await _store_id(tmp_path / "b.db") != first


async def test_a_store_made_before_the_store_id_gets_one_when_it_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    older = await Store.open(path, migrations=MIGRATIONS[: MIGRATIONS.index(STORE_ID_MIGRATION)])
    assert older.store_id == ""
    await older.close()
    got = await _store_id(path)
    assert uuid.UUID(got).version == 4
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1][0]
    con.close()


async def _first_incomplete_id(path: Path) -> str:
    store = await Store.open(path)
    try:
        await store.register_upstreams([("central", "none")], NOW)
        got = parse_delivery(
            json.dumps({"source": "PUMP-07/Trip", "transitionId": "T1"}), arrival_at=NOW, receiver="test"
        )
        assert not isinstance(got, Rejection)
        await store.record([got])
        (entry,) = await store.outbox.claim("central", 10)
        event = encode(entry, site="plant-1", gateway="gw", replayed=False, store_id=store.store_id)
        assert entry.ref_id == 1  # a fresh store: arrival ids start at 1
        return event.ce_id
    finally:
        await store.close()


async def test_arrival_1_of_a_replaced_store_never_meets_arrival_1_of_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    old = await _first_incomplete_id(path)
    old_id = await _store_id(path)
    path.rename(tmp_path / "events.db.corrupt")
    new = await _first_incomplete_id(path)
    assert old == f"{old_id}:1"
    assert new.endswith(":1") and new != old

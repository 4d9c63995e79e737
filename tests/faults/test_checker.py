"""The checker itself can fail: each broken property of a real store is reported."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from agent.core.contract import Anomaly, Delivery
from agent.core.intake import parse_delivery
from agent.store.store import Store


async def make_store(db: Path) -> None:
    store = await Store.open(db)
    await store.register_upstreams([("historian", "none")], "2026-04-22T08:00:00.000Z")
    items = []
    for n in range(1, 6):
        obj = {"source": "PLC-00/Trip", "transitionId": n, "bootId": "17", "payload": {"state": "Trip"}}
        d = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(d, Delivery)
        items.append(d)
    await store.record(items)
    await store.db.execute("UPDATE outbox SET state = 'delivered'")
    await store.close()


def upstream(checker: ModuleType, keys: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    return [
        {
            "type": checker.TRANSITION,
            **dict(zip(("source", "id"), checker.cloud_id("plant-1", k), strict=True)),
        }
        for k in keys
    ]


async def test_a_sound_store_passes_and_each_broken_property_is_reported(
    checker: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    await make_store(db)
    keys = sorted(checker.committed_keys(db))
    assert checker.check(db, site="plant-1", upstream_events=upstream(checker, keys), made=keys).ok

    ghost = ("PLC-00/Trip", "99", "17")
    v = checker.check(
        db, site="plant-1", upstream_events=upstream(checker, [*keys[1:], ghost]), made=[*keys, ghost]
    )
    assert v.lost == [ghost] and len(v.upstream_missing) == 1 and len(v.upstream_invented) == 1, v.problems()

    con = sqlite3.connect(db)
    con.execute("DELETE FROM outbox WHERE rowid = (SELECT min(rowid) FROM outbox)")
    con.execute("UPDATE outbox SET state = 'pending' WHERE rowid = (SELECT max(rowid) FROM outbox)")
    con.commit()
    con.close()
    v = checker.check(db, site="plant-1", upstream_events=upstream(checker, keys))
    assert v.without_outbox == 1 and v.undelivered == 1, v.problems()

    con = sqlite3.connect(db)  # an index that no longer matches its table
    con.execute("PRAGMA writable_schema=ON")
    page = con.execute(
        "SELECT rootpage FROM sqlite_schema WHERE type='index' AND tbl_name='events' LIMIT 1"
    ).fetchone()[0]
    con.close()
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    data[(page - 1) * size + 3] ^= 0x01  # the index page's cell count
    db.write_bytes(bytes(data))
    assert checker.integrity(db) != "ok"


GAP_CASES = [
    # (made key beyond the store's 1..5, acknowledged before?, gaps_accounted, lost?)
    (("PLC-00/Trip", "7", "17"), False, True, False),  # inside the overrun record 6..8 of its boot
    (("PLC-00/Trip", "6", "17"), False, True, False),  # the record's first value
    (("PLC-00/Trip", "8", "17"), False, True, False),  # the record's last value
    (("PLC-00/Trip", "9", "17"), False, True, True),  # outside every record
    (("PLC-00/Trip", "7", "18"), False, True, True),  # same transitionId, other boot
    (("PLC-00/OverTemp", "7", "17"), False, True, True),  # same boot, other source
    (("PLC-00/Trip", "7", "17"), True, True, True),  # was committed once: a record never excuses it
    (("PLC-00/Trip", "7", "17"), False, False, True),  # records not accepted in this check
]


@pytest.mark.parametrize(("key", "acknowledged", "gaps_accounted", "lost"), GAP_CASES)
async def test_a_made_key_inside_an_overrun_record_is_accounted_only_if_never_committed(
    checker: ModuleType,
    tmp_path: Path,
    key: tuple[str, str, str],
    acknowledged: bool,
    gaps_accounted: bool,
    lost: bool,
) -> None:
    db = tmp_path / "s.db"
    await make_store(db)
    store = await Store.open(db)
    at = "2026-04-22T08:00:01.000Z"
    await store.record([], anomalies=[Anomaly("PLC-00/Trip", "17", "overrun", "6", "8", at, {})], now=at)
    await store.db.execute("UPDATE outbox SET state = 'delivered'")  # the record went upstream too
    await store.close()
    keys = sorted(checker.committed_keys(db))
    tracker = checker.Tracker(db)
    tracker.snapshot()
    if acknowledged:
        tracker.acknowledged.add(key)
    v = checker.check(
        db, site="plant-1", upstream_events=upstream(checker, keys), tracker=tracker,
        made=[*keys, key], gaps_accounted=gaps_accounted,
    )  # fmt: skip
    assert v.lost == ([key] if lost else []), v.problems()
    assert v.inside_gaps == (0 if lost else 1)
    assert v.ok is not lost
    inside_record = key[0] == "PLC-00/Trip" and key[2] == "17" and 6 <= int(key[1]) <= 8
    assert checker.in_gap(key, checker.gap_ranges(db)) is inside_record

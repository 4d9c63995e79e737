"""Salvage of a damaged store, with real damage to a real file: overwritten pages, a truncated
file, a damaged header. The new store takes every undelivered outbox row it can read, with its
record, keeps every key, invents nothing, takes nothing delivered, and counts what it could not
read so that (taken + not taken + unreadable) covers every undelivered row of the old store."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.config.loader import Config, StoreConfig
from agent.core.contract import Anomaly, Delivery
from agent.core.intake import parse_delivery
from agent.core.send_outcome import DELIVERED
from agent.service.store_open import open_store
from agent.store.salvage import SalvageReport
from agent.store.store import Store

NOW = "2026-04-22T08:00:00.000Z"
EVENTS = 1500
DELIVERED_FIRST = 400
PAD = "x" * 150  # a payload of some size, so the tables span many pages

pytestmark = pytest.mark.timeout(60)


def delivery(i: int, *, boot: str | None = "B1") -> Delivery:
    obj: dict[str, Any] = {
        "source": f"PLC-{i % 3:02d}/Trip",
        "transitionId": str(i),
        "sourceTimestamp": "2026-04-22T07:00:00.000Z",
        "payload": {"state": "Trip" if i % 2 else "Normal", "pad": PAD, "n": i},
    }
    if boot is not None:
        obj["bootId"] = boot
    got = parse_delivery(json.dumps(obj), arrival_at=NOW, receiver="modbus://test")
    assert isinstance(got, Delivery)
    return got


async def build_old_store(path: Path) -> None:
    """1,500 events of 3 PLCs, 3 identity-incomplete arrivals, 2 gaps; the first 400 outbox
    rows delivered, the rest pending (some after a failed attempt)."""
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], NOW)
    for start in range(0, EVENTS, 250):
        await store.record([delivery(i) for i in range(start, start + 250)])
    await store.record([delivery(EVENTS + i, boot=None) for i in range(3)])
    await store.record(
        [], anomalies=[Anomaly(f"PLC-0{n}/Trip", "B1", "gap", "7", "9", NOW) for n in range(2)], now=NOW
    )
    claimed = await store.outbox.claim("central", DELIVERED_FIRST)
    await store.outbox.settle([(e.outbox_id, DELIVERED) for e in claimed], NOW)
    await store.outbox.claim("central", 10)  # attempted once, never acknowledged: still pending
    await store.close()


def undelivered(path: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    """(kind, what) -> attempts of every pending outbox row, read from the intact file."""
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT o.kind, o.attempts, e.source, e.transition_id, e.boot_id, e.payload_hash,"
        " a.source, a.from_value, r.raw, b.device, b.boot_id"
        " FROM outbox o LEFT JOIN events e ON o.kind = 'transition' AND e.canonical_id = o.ref_id"
        " LEFT JOIN anomalies a ON o.kind IN ('gap','anomaly') AND a.anomaly_id = o.ref_id"
        " LEFT JOIN arrivals r ON o.kind = 'identity_incomplete' AND r.arrival_id = o.ref_id"
        " LEFT JOIN boots b ON o.kind = 'boot_observed' AND b.boot_row = o.ref_id"
        " WHERE o.state = 'pending'"
    ).fetchall()
    con.close()
    return {_what(r[0], r[2:]): r[1] for r in rows}


def _what(kind: str, r: tuple[Any, ...]) -> tuple[str, str]:
    if kind == "transition":
        return kind, f"{r[0]}|{r[1]}|{r[2]}|{r[3]}"
    if kind in ("gap", "anomaly"):
        return kind, f"{r[4]}|{r[5]}"
    if kind == "identity_incomplete":
        return kind, str(r[6])
    return kind, f"{r[7]}|{r[8]}"


def taken_over(path: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    return undelivered(path)


# --- real damage ------------------------------------------------------------------------------


def _page_size(data: bytes | bytearray) -> int:
    return int.from_bytes(data[16:18], "big") or 65536


def overwrite_pages(db: Path, rng: random.Random, pages: int = 4) -> None:
    """Random bytes over whole leaf pages of the outbox and the events (found with `dbstat`, so
    the damage always hits rows salvage must take, whatever the schema's page layout is)."""
    with sqlite3.connect(db) as con:
        leaves = [
            int(n)
            for (n,) in con.execute(
                "SELECT pageno FROM dbstat WHERE name IN ('outbox', 'events') AND pagetype = 'leaf'"
                " ORDER BY pageno"
            )
        ]
    con.close()
    data = bytearray(db.read_bytes())
    size = _page_size(data)
    for n in rng.sample(leaves, pages):
        data[(n - 1) * size : n * size] = rng.randbytes(size)
    db.write_bytes(bytes(data))


def truncate(db: Path, _rng: random.Random) -> None:
    data = db.read_bytes()
    size = _page_size(data)
    db.write_bytes(data[: (len(data) // size) * 7 // 10 * size + 1000])  # 70 %, mid-page


def bad_header(db: Path, rng: random.Random) -> None:
    data = bytearray(db.read_bytes())
    data[0:100] = rng.randbytes(100)
    db.write_bytes(bytes(data))


def config(db: Path) -> Config:
    return Config("plant-1", "gw", StoreConfig(str(db)), ())


def clock() -> datetime:
    return datetime(2026, 4, 22, 9, 0, tzinfo=UTC)


async def reopen(db: Path) -> tuple[Store, str | None, SalvageReport | None]:
    return await open_store(str(db), config(db), clock)


@pytest.mark.parametrize(
    ("damage", "everything"),
    [
        pytest.param(overwrite_pages, False, id="overwritten pages"),
        pytest.param(truncate, False, id="a truncated file"),
        pytest.param(bad_header, True, id="a damaged header"),
    ],
)
async def test_a_damaged_store_is_replaced_by_one_that_holds_what_could_be_read(
    tmp_path: Path, damage: Callable[[Path, random.Random], None], everything: bool
) -> None:
    db = tmp_path / "events.db"
    await build_old_store(db)
    before = undelivered(db)
    old_id = sqlite3.connect(db).execute("SELECT value FROM store_meta").fetchone()[0]
    assert len(before) == EVENTS + 3 + 2 + 3 - DELIVERED_FIRST  # + 3 boots (one per PLC)
    damage(db, random.Random(7))

    store, alarm, report = await reopen(db)
    try:
        assert report is not None and alarm is not None
        assert "salvaged" in alarm and "could not be read" in alarm
        assert store.store_id != old_id
        meta = json.loads(
            (await store.db.execute_fetchall("SELECT value FROM store_meta WHERE name = 'salvage'"))[0][0]
        )
        assert meta["outbox_rows"] == report.outbox_rows
    finally:
        await store.close()
    after = taken_over(db)
    # nothing invented; nothing delivered is sent again except the last event of a source and
    # boot (kept as tracker state, with its outbox rows like every canonical event)
    extra = set(after) - set(before)
    assert len(extra) <= report.last_events and all(kind == "transition" for kind, _ in extra)
    assert all(after[k] == before[k] for k in after if k in before)  # attempt counts carried over
    assert report.outbox_rows == len(after)
    taken = report.outbox_rows - len(extra)
    assert taken + report.outbox_rows_lost + report.unreadable_rows >= len(before)
    if everything:
        assert after == before and report.unreadable_rows == report.outbox_rows_lost == 0
    else:
        assert 0 < len(after) < len(before)
        assert report.unreadable_rows + report.outbox_rows_lost > 0


async def test_salvage_keeps_the_tracker_state_and_a_salvaged_event_stays_one_event(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    await build_old_store(db)
    con = sqlite3.connect(db)  # where the pollers stood (written by the pollers' batches)
    con.execute(
        "INSERT INTO channel_positions VALUES ('PLC-00/Trip', 'B1', 1497), ('PLC-01/Trip', 'B1', 1498)"
    )
    con.execute("INSERT INTO ring_positions VALUES ('PLC-00', 12)")
    con.commit()
    con.close()
    overwrite_pages(db, random.Random(3), pages=2)
    store, _alarm, report = await reopen(db)
    try:
        assert report is not None and report.boots == 3 and report.device_state == 3
        assert report.positions == 3
        channels = await store.db.execute_fetchall("SELECT * FROM channel_positions ORDER BY source")
        assert [tuple(r) for r in channels] == [("PLC-00/Trip", "B1", 1497), ("PLC-01/Trip", "B1", 1498)]
        assert [tuple(r) for r in await store.db.execute_fetchall("SELECT * FROM ring_positions")] == [
            ("PLC-00", 12)
        ]
        live = dict(await store.db.execute_fetchall("SELECT device, last_live_boot FROM device_state"))
        assert live == {f"PLC-{n:02d}": "B1" for n in range(3)}
        keys = await store.db.execute_fetchall("SELECT transition_id FROM events")
        some = int(sorted(keys)[0][0])
        # the controller's ring gives the same transition back: a duplicate, not a second event
        outcomes = await store.record([delivery(some)])
        assert [o.decision.value for o in outcomes] == ["duplicate"]
        arrivals = await store.db.execute_fetchall(
            "SELECT receiver, count(*) FROM arrivals GROUP BY receiver ORDER BY receiver"
        )
        assert ("salvage", report.events) in [tuple(r) for r in arrivals]
    finally:
        await store.close()


async def test_a_file_that_is_no_database_at_all_starts_a_new_store_and_says_nothing_was_read(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    db.write_bytes(random.Random(1).randbytes(64 * 1024))
    store, alarm, report = await reopen(db)
    await store.close()
    assert report is not None and report.outbox_rows == 0
    assert report.problem is not None and "not readable" in report.problem
    assert alarm is not None and "not readable" in alarm


async def test_a_salvage_cut_short_by_a_crash_is_done_again_at_the_next_start(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    await build_old_store(db)
    before = undelivered(db)
    bad_header(db, random.Random(2))
    # The state a crash leaves in the middle of the replacement: the marker written, the damaged
    # file moved aside, a half-made new store, nothing at the store's path.
    damaged = tmp_path / "events.db.corrupt-20260422T085900Z"
    (tmp_path / "events.db.salvaging").write_text(str(damaged))
    db.rename(damaged)
    (tmp_path / "events.db.salvage-new").write_bytes(b"half made")
    store, alarm, report = await reopen(db)
    await store.close()
    assert report is not None and report.outbox_rows == len(before)
    assert alarm is not None and "interrupted by a crash was done again" in alarm
    assert taken_over(db) == before
    assert not (tmp_path / "events.db.salvaging").exists()
    assert not (tmp_path / "events.db.salvage-new").exists()


async def test_a_crash_before_the_damaged_file_was_moved_only_leaves_a_marker_that_goes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    await build_old_store(db)
    bad_header(db, random.Random(2))
    (tmp_path / "events.db.salvaging").write_text(str(tmp_path / "events.db.corrupt-20260422T085900Z"))
    store, alarm, report = await reopen(db)  # finds the file damaged again and replaces it now
    await store.close()
    assert report is not None and report.unreadable_rows == 0
    assert alarm is not None and "store was damaged" in alarm
    assert not (tmp_path / "events.db.salvaging").exists()
    assert (tmp_path / "events.db.corrupt-20260422T090000Z").exists()


async def test_when_everything_was_delivered_the_last_event_per_source_and_boot_is_still_kept(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    await build_old_store(db)
    con = sqlite3.connect(db)
    con.execute("UPDATE outbox SET state = 'delivered'")
    con.commit()
    con.close()
    bad_header(db, random.Random(4))
    store, _alarm, report = await reopen(db)
    try:
        assert report is not None and report.events == 0
        assert report.last_events == 3 == report.outbox_rows  # PLC-00, -01 and -02 under B1
        rows = await store.db.execute_fetchall("SELECT source, transition_id FROM events ORDER BY source")
        last = {s: max(int(t) for t in range(EVENTS) if f"PLC-{t % 3:02d}/Trip" == s) for s, _ in rows}
        assert [(s, int(t)) for s, t in rows] == sorted(last.items())
        pending = await store.db.execute_fetchall("SELECT upstream, state FROM outbox")
        assert [tuple(r) for r in pending] == [("central", "pending")] * 3  # sent once more, replayed
    finally:
        await store.close()

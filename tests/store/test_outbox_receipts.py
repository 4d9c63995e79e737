"""Receipts in the store and the keeper (real SQLite files): an acknowledged row of a receipts
upstream is `sent`, a receipt makes it `delivered` (also before its PUBACK was settled), and a
`sent` row without one goes back to `pending` when overdue, on a new connection, and after the
migration that brought the state; retention keeps a `sent` row's event."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deliveries import AT, delivery

from agent.core.receipts import Receipt, encode_receipt, ranges
from agent.core.retention import delivery_verdict
from agent.core.send_outcome import DELIVERED, retry
from agent.service.receipts import MAX_WAIT_S, ReceiptKeeper
from agent.store.schema import MIGRATIONS, RECEIPTS_MIGRATION
from agent.store.store import Store

d = delivery


def states(path: Path, upstream: str = "ledger") -> dict[int, str]:
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT outbox_id, state FROM outbox WHERE upstream = ?", (upstream,)).fetchall()
    return dict(rows)


async def filled(path: Path, n: int = 5) -> Store:  # five transitions and a boot: six rows each
    store = await Store.open(path)
    await store.register_upstreams([("ledger", "none"), ("other", "none")], AT)
    await store.record([d(str(k)) for k in range(n)])
    return store


async def test_acknowledged_rows_are_sent_then_delivered_by_their_receipt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await filled(path)
    rows = await store.outbox.claim("ledger", 10)
    ids = [e.outbox_id for e in rows]
    await store.outbox.settle(
        [(ids[0], retry("no PUBACK"))] + [(i, DELIVERED) for i in ids[1:]], AT, receipts=True
    )
    assert states(path) == {ids[0]: "pending", **{i: "sent" for i in ids[1:]}}
    counts = {c.upstream: c for c in await store.outbox.counts()}["ledger"]
    assert (counts.awaiting_receipt, counts.oldest_awaiting_at, counts.delivered) == (5, AT, 0)
    # The receipt names a sent row, the pending row (its earlier attempt was committed), a row of
    # another upstream and a row that does not exist: only this upstream's rows change.
    other = [e.outbox_id for e in await store.outbox.claim("other", 1)]
    changed = await store.outbox.confirm("ledger", [ids[0], ids[1], other[0], 10**9], AT)
    assert changed == 2
    assert states(path) == {ids[0]: "delivered", ids[1]: "delivered", **{i: "sent" for i in ids[2:]}}
    assert states(path, "other")[other[0]] == "pending"
    # A receipt again changes nothing; the settle of a row already confirmed leaves it delivered.
    assert await store.outbox.confirm("ledger", [ids[1]], AT) == 0
    await store.outbox.settle([(ids[0], DELIVERED)], AT, receipts=True)
    assert states(path)[ids[0]] == "delivered"
    await store.close()


async def test_sent_rows_go_back_to_pending_when_overdue_and_all_of_them_on_request(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await filled(path)
    ids = [e.outbox_id for e in await store.outbox.claim("ledger", 10)]
    await store.outbox.settle([(i, DELIVERED) for i in ids[:3]], "2026-04-22T08:00:00.000Z", receipts=True)
    await store.outbox.settle([(i, DELIVERED) for i in ids[3:]], "2026-04-22T08:01:00.000Z", receipts=True)
    assert await store.outbox.requeue_sent("ledger", sent_before="2026-04-22T08:00:30.000Z") == 3
    assert [states(path)[i] for i in ids] == ["pending"] * 3 + ["sent"] * 3
    assert await store.outbox.requeue_sent("other") == 0
    assert await store.outbox.requeue_sent("ledger") == 3
    assert set(states(path).values()) == {"pending"}
    # Sent again: same rows, the next attempt.
    again = await store.outbox.claim("ledger", 10)
    assert [e.outbox_id for e in again] == ids and {e.attempt for e in again} == {2}
    await store.close()


def test_retention_keeps_an_event_whose_row_awaits_its_receipt() -> None:
    assert delivery_verdict(["delivered", "sent"]) is not None
    assert delivery_verdict(["delivered", "delivered"]) is None


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 4, 22, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_the_keeper_confirms_resends_overdue_rows_backs_off_and_resends_on_a_new_connection(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await filled(path)
    clock = Clock()
    rewinds: list[int] = []
    keeper = ReceiptKeeper(
        store.outbox, "ledger", store.store_id, "gw-1", 2.0, clock, lambda: rewinds.append(1)
    )
    assert keeper.topic == f"receipts/gw-1/{store.store_id}"
    stop = asyncio.Event()
    task = asyncio.create_task(keeper.run(stop))

    async def settled() -> None:  # one turn of the keeper (its tick is 0.5 s at a 2 s timeout)
        keeper.on_wake()
        await asyncio.sleep(0.05)

    ids = [e.outbox_id for e in await store.outbox.claim("ledger", 10)]
    await store.outbox.settle([(i, DELIVERED) for i in ids], "2026-04-22T08:00:00.000Z", receipts=True)
    keeper.on_receipt(encode_receipt(Receipt(store.store_id, ranges(ids[:2]), "ledger-1")))
    keeper.on_receipt(encode_receipt(Receipt("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", ranges(ids), "x")))
    keeper.on_receipt(b"garbage")
    await settled()
    assert [states(path)[i] for i in ids] == ["delivered"] * 2 + ["sent"] * 4
    assert (keeper.counts.receipts, keeper.counts.confirmed, keeper.counts.refused) == (1, 2, 2)
    # Overdue: nothing came back for these rows in 2 s; other receipts came, so no backoff.
    clock.now += timedelta(seconds=3)
    await asyncio.sleep(0.7)
    assert [states(path)[i] for i in ids[2:]] == ["pending"] * 4 and rewinds
    assert keeper.counts.resent == 4 and keeper.counts.wait_s == 2.0
    # Sent again and again no receipt at all: the wait doubles, round after round, up to its cap.
    for expected in (4.0, 8.0):
        await store.outbox.claim("ledger", 10)
        await store.outbox.settle([(i, DELIVERED) for i in ids[2:]], keeper._now(), receipts=True)
        clock.now += timedelta(seconds=keeper.counts.wait_s + 1)
        await asyncio.sleep(0.7)
        assert keeper.counts.wait_s == expected
    assert keeper.counts.wait_s <= MAX_WAIT_S
    # A receipt brings the wait back; a new connection sends every row sent before it again at
    # once, and a row sent on the new connection waits for its own receipt.
    await store.outbox.claim("ledger", 10)
    await store.outbox.settle([(i, DELIVERED) for i in ids[2:5]], keeper._now(), receipts=True)
    keeper.on_receipt(encode_receipt(Receipt(store.store_id, ranges(ids[2:3]), "ledger-1")))
    await settled()
    assert keeper.counts.wait_s == 2.0
    clock.now += timedelta(seconds=0.5)
    keeper.on_connection()
    clock.now += timedelta(seconds=0.5)
    await store.outbox.settle([(ids[5], DELIVERED)], keeper._now(), receipts=True)
    await settled()
    assert [states(path)[i] for i in ids] == ["delivered"] * 3 + ["pending"] * 2 + ["sent"]
    stop.set()
    keeper.on_wake()
    await asyncio.wait_for(task, 5)
    await store.close()


async def test_the_migration_keeps_every_row_and_never_hands_out_an_id_twice(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = MIGRATIONS[: MIGRATIONS.index(RECEIPTS_MIGRATION)]
    old = await Store.open(path, migrations=before)
    await old.register_upstreams([("ledger", "none")], AT)
    await old.record([d(str(k)) for k in range(5)])
    ids = [e.outbox_id for e in await old.outbox.claim("ledger", 10)]
    await old.outbox.settle([(i, DELIVERED) for i in ids[:2]], AT)
    await old.close()
    with sqlite3.connect(path) as con:  # the newest rows pruned: their ids must not come back
        con.execute("DELETE FROM outbox WHERE outbox_id >= ?", (ids[3],))
        rows_before = con.execute("SELECT * FROM outbox ORDER BY outbox_id").fetchall()
    store = await Store.open(path)
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT * FROM outbox ORDER BY outbox_id").fetchall() == rows_before
        assert con.execute("PRAGMA user_version").fetchone()[0] == RECEIPTS_MIGRATION[0]
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'outbox'")}
    assert {"outbox_pending", "sparkplug_sends_gone"} <= names
    await store.record([d("new")])
    newest = max(states(path))
    assert newest > ids[-1], "a pruned row's id is never handed out again"
    await store.outbox.settle([(ids[2], DELIVERED)], AT, receipts=True)
    assert states(path)[ids[2]] == "sent"
    await store.close()

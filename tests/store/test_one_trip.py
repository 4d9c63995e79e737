"""The record transaction in one trip to the SQLite thread: BEGIN IMMEDIATE, every statement of
the batch and COMMIT run as one call there (`WriterConnection.transact`), with the semantics of
`WriteTransaction`: all of it committed, or nothing, and sqlite3 errors as StoreErrors."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.core.contract import Anomaly, Delivery
from agent.core.decide import BootSighting
from agent.core.errors import StoreError
from agent.core.snapshot import Positions, make_delivery
from agent.store.connection import WriterConnection
from agent.store.store import Store

AT = "2026-04-22T08:00:00.000Z"


def delivery(tid: int, boot: str = "17") -> Delivery:
    return make_delivery(
        device="PUMP-07", channel="Trip", transition_id=tid, boot_id=boot, state="Trip",
        source_timestamp=AT, latched={}, arrival_at=AT, receiver="modbus:x", live=True, raw={},
    )  # fmt: skip


async def count(store: Store, table: str) -> int:
    rows = list(await store.db.execute_fetchall(f"SELECT count(*) FROM {table}"))
    return int(rows[0][0])


async def test_a_batch_with_boots_gaps_and_positions_takes_one_trip(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.register_upstreams([("hq", "none")], AT)
    trips: list[Any] = []
    run = store.db._execute

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(fn)
        return await run(fn, *args, **kwargs)

    monkeypatch.setattr(store.db, "_execute", counted)
    outcomes = await store.record(
        [delivery(5), delivery(6), delivery(6)],
        boot_sightings=[BootSighting("PUMP-07", "17", AT, None, True, {"register": 1})],
        anomalies=[Anomaly("PUMP-07/Trip", "17", "gap", "1", "4", AT, {"receiver": "modbus:x"})],
        positions=[Positions("PUMP-07", "17", {"Trip": 6}, 12)],
        now=AT,
    )
    assert len(trips) == 1
    assert [str(o.decision) for o in outcomes] == ["inserted", "inserted", "duplicate"]
    monkeypatch.undo()
    assert await count(store, "events") == 2
    assert await count(store, "arrivals") == 3
    assert await count(store, "boots") == 1
    assert await count(store, "anomalies") == 1
    assert await count(store, "outbox") == 4  # two transitions, the boot, the gap
    assert await count(store, "channel_positions") == 1


async def test_a_failure_inside_rolls_back_every_statement_before_it(store: Store) -> None:
    writer: WriterConnection = store._writer

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO device_state(device, last_live_boot) VALUES ('A', '1')")
        raise KeyError("a bug after the first statement")

    with pytest.raises(KeyError):  # not an sqlite3 error: leaves as it is
        async with writer.lock:
            await writer.transact(half_then_fail)

    def half_then_sqlite_error(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO device_state(device, last_live_boot) VALUES ('A', '1')")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(StoreError, match="no such table"):
        async with writer.lock:
            await writer.transact(half_then_sqlite_error)
    assert await count(store, "device_state") == 0
    # the connection is usable and outside any transaction afterwards
    await store.record([delivery(1)])
    assert await count(store, "events") == 1


async def test_begin_refused_while_another_connection_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path, busy_timeout_s=0.05) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="locked"):
                await store.record([delivery(1)])
        finally:
            other.execute("ROLLBACK")
            other.close()
        await store.record([delivery(1)])
        assert await count(store, "events") == 1


async def test_a_cancelled_caller_never_leaves_half_a_transaction(store: Store) -> None:
    """Cancelled while its transaction runs on the thread: the transaction still ends whole
    (here committed), as a COMMIT already queued did; never half of it."""
    writer: WriterConnection = store._writer
    started = threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO device_state(device, last_live_boot) VALUES ('A', '1')")
        started.set()
        time.sleep(0.2)
        conn.execute("INSERT INTO device_state(device, last_live_boot) VALUES ('B', '1')")

    async def go() -> None:
        async with writer.lock:
            await writer.transact(slow)

    task = asyncio.ensure_future(go())
    while not started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await count(store, "device_state") == 2  # queued behind the transaction: sees all of it

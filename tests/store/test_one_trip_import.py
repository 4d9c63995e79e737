"""More of the record transaction in one trip to the connection's thread (`WriterConnection.transact`): it
runs there and commits, it rolls all back on an error, and a record cancelled while it waits for
the write lock leaves the connection usable. Real SQLite files; the wait is made real by a second
connection holding the write lock."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path

import pytest

from agent.core.contract import Delivery
from agent.core.errors import StoreError
from agent.core.intake import parse_delivery
from agent.store.store import Store


def delivery(tid: str) -> Delivery:
    got = parse_delivery(
        json.dumps({"source": "P-1/Trip", "transitionId": tid, "bootId": "B1", "payload": {"v": 1}}),
        arrival_at="2026-04-22T08:00:00.000Z",
        receiver="test",
    )
    assert isinstance(got, Delivery)
    return got


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as con:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


async def test_the_statements_run_on_the_connections_own_thread_and_commit(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db", check=False) as store:
        seen: list[int] = []

        def work(conn: sqlite3.Connection) -> int:
            seen.append(threading.get_ident())
            conn.execute("INSERT INTO live_state(name, updated_at, state) VALUES ('x', 't', '{}')")
            return len(conn.execute("SELECT name FROM live_state").fetchall())

        assert await store._writer.transact(work) == 1
        assert seen and seen[0] != threading.get_ident()
    assert count(tmp_path / "s.db", "live_state") == 1


async def test_an_error_in_the_transaction_rolls_all_of_it_back(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db", check=False) as store:

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO live_state(name, updated_at, state) VALUES ('x', 't', '{}')")
            conn.execute("INSERT INTO no_such_table VALUES (1)")

        with pytest.raises(StoreError, match="no_such_table"):
            await store._writer.transact(work)
        await store.record([delivery("T1")])  # the connection is usable again
    assert count(tmp_path / "s.db", "live_state") == 0
    assert count(tmp_path / "s.db", "events") == 1


async def test_a_record_cancelled_while_waiting_for_the_lock_leaves_the_connection_usable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path, check=False, busy_timeout_s=10) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the record's BEGIN IMMEDIATE waits for this lock
        task = asyncio.create_task(store.record([delivery("T1")]))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other.execute("ROLLBACK")
        other.close()
        # Queued behind the cancelled one on the same thread. (Before the one trip, the cancelled
        # call's BEGIN still ran and left the connection inside it: this record then failed with
        # "cannot start a transaction within a transaction".)
        await store.record([delivery("T2")])
    # Cancelled means "not known to be recorded": the transaction ran to its end on the thread.
    assert count(path, "events") == 2
    assert count(path, "arrivals") == 2

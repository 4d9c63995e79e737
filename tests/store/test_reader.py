"""The store's reader on real files: read-only, never migrates or creates, never waits for the writer;
and two processes opening one fresh store at once both succeed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agent.core.errors import StoreError
from agent.core.intake import parse_delivery
from agent.store.connection import StoreMissing
from agent.store.reader import Reader
from agent.store.schema import MIGRATIONS
from agent.store.store import Store

AT = "2026-04-22T08:00:00.000Z"


def line(tid: str) -> str:
    return json.dumps({"source": "PUMP-07/Trip", "transitionId": tid, "bootId": "B17", "payload": {}})


async def test_the_reader_sees_what_the_writer_committed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path) as store:
        await store.register_upstreams([("hist", "none")], AT)
        await store.record([parse_delivery(line(t), arrival_at=AT, receiver="t") for t in ("1", "2", "1")])
        async with await Reader.open(path) as reader:
            summary = await reader.summary()
            assert (summary["source_events"], summary["arrivals"], summary["duplicates"]) == (2, 3, 1)
            assert [b["bootId"] async for b in reader.boots()] == ["B17"]
            assert [c.pending for c in await reader.outbox_counts()] == [3]  # 2 events + 1 boot
            assert await reader.last_live_boots() == {"PUMP-07": "B17"}


async def test_the_reader_reads_while_the_writer_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path) as store:
        await store.record([parse_delivery(line("1"), arrival_at=AT, receiver="t")])
        async with store._lock, store._transaction():
            await store.db.execute("DELETE FROM pending")  # the write lock is held from here on
            async with await Reader.open(path) as reader:
                assert (await reader.summary())["source_events"] == 1


async def test_the_reader_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await (await Store.open(path)).close()
    reader = await Reader.open(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await reader._db.execute("CREATE TABLE t(x)")
    finally:
        await reader.close()


async def test_the_reader_never_creates_nor_migrates(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="nowhere"):
        await Reader.open(tmp_path / "nowhere" / "s.db")
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old.db"
    await (await Store.open(old, migrations=MIGRATIONS[:1])).close()
    with pytest.raises(StoreError, match="schema version 1"):
        await Reader.open(old)
    con = sqlite3.connect(old)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    con.close()


OPEN_AND_CLOSE = (
    "import asyncio, sys\nfrom agent.store.store import Store\n"
    "async def main():\n    await (await Store.open(sys.argv[1])).close()\nasyncio.run(main())"
)


def test_two_processes_opening_one_fresh_store_both_succeed(tmp_path: Path) -> None:
    for n in range(20):
        path = tmp_path / f"fresh-{n}.db"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_AND_CLOSE, str(path)], stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errors
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1][0]
        con.close()

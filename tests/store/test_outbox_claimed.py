"""The claim made with a settle: the next rows' attempts counted over the range read, and the
entries handed over one at a time (real SQLite files)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from deliveries import AT, delivery

from agent.core.records import Entry
from agent.core.send_outcome import DELIVERED, rejected
from agent.store.connection import on_thread
from agent.store.store import Store

d = delivery


def outbox(path: Path) -> dict[int, tuple[str, str, int]]:
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT outbox_id, upstream, state, attempts FROM outbox").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


async def test_the_claim_with_a_settle_counts_exactly_the_rows_it_read(tmp_path: Path) -> None:
    # Rows of another upstream and rows of this one that are no longer pending sit between the
    # rows claimed: only the pending rows of this upstream are read, and only they get an attempt.
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([("central", "none"), ("other", "none")], AT)
    await store.record([d(str(n)) for n in range(12)])
    first = await store.outbox.claim("central", 2)
    before = outbox(path)
    central = sorted(i for i, (up, _, _) in before.items() if up == "central" and i > first[-1].outbox_id)
    with sqlite3.connect(path) as con:  # settled earlier: one delivered, one dead letter
        con.execute("UPDATE outbox SET state = 'delivered', attempts = 3 WHERE outbox_id = ?", (central[2],))
        con.execute("UPDATE outbox SET state = 'rejected', attempts = 2 WHERE outbox_id = ?", (central[5],))
    nxt, _ = await store.outbox.settle_and_claim_prepared(
        [(e.outbox_id, DELIVERED) for e in first], AT, "central", 100, after=first[-1].outbox_id
    )
    claimed = [e.outbox_id for e in nxt]
    after = outbox(path)
    await store.close()
    assert claimed == [i for i in central if i not in (central[2], central[5])]
    assert all(e.attempt == 1 for e in nxt)
    for i, (up, state, attempts) in after.items():
        if i in claimed:
            assert (up, state, attempts) == ("central", "pending", 1)
        elif i in (e.outbox_id for e in first):
            assert (up, state, attempts) == ("central", "delivered", 1)
        elif i == central[2]:
            assert (state, attempts) == ("delivered", 3)
        elif i == central[5]:
            assert (state, attempts) == ("rejected", 2)
        else:
            assert (up, state, attempts) == ("other", "pending", 0), i


async def test_the_rows_claimed_with_a_settle_are_a_sequence_of_the_same_entries(tmp_path: Path) -> None:
    # They are built when asked for: by index, by slice, iterated again, every kind with its record.
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], AT)
    await store.record([d(str(n)) for n in range(5)])  # 5 transitions + 1 boot_observed
    first = await store.outbox.claim("central", 1)
    handed: list[Any] = []

    async def prepare(entries: Any) -> None:
        handed.append(entries)

    nxt, _ = await store.outbox.settle_and_claim_prepared(
        [(first[0].outbox_id, DELIVERED)], AT, "central", 10, after=first[0].outbox_id, prepare=prepare
    )
    await store.close()
    assert handed == [nxt]
    listed = list(nxt)
    assert all(type(e) is Entry for e in listed) and listed == list(nxt)
    assert len(nxt) == len(listed) == 5
    assert {e.kind for e in listed} == {"transition", "boot_observed"}
    assert all(e.record is not None for e in listed)
    assert nxt[0] == listed[0] and nxt[-1] == listed[-1] and nxt[1:3] == listed[1:3]
    assert [e.attempt for e in listed] == [1] * 5


async def test_rows_claimed_with_a_settle_and_never_settled_go_out_again_with_the_next_attempt(
    tmp_path: Path,
) -> None:
    # A crash after the commit that counted the next rows' attempts (they may have been sent):
    # after a restart the claim from the head hands them out again with attempt 2, and a retry
    # and a requeued dead letter among them keep counting from what is stored.
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], AT)
    await store.record([d(str(n)) for n in range(6)])  # 6 transitions + 1 boot_observed
    first = await store.outbox.claim("central", 2)
    nxt, _ = await store.outbox.settle_and_claim_prepared(
        [(e.outbox_id, DELIVERED) for e in first], AT, "central", 3, after=first[-1].outbox_id
    )
    claimed = [(e.outbox_id, e.attempt) for e in nxt]
    await store.close()  # no settle of `nxt`: the process is gone
    store = await Store.open(path)
    again = await store.outbox.claim("central", 10)
    assert [(e.outbox_id, e.attempt) for e in again][:3] == [(i, a + 1) for i, a in claimed]
    assert [e.attempt for e in again][3:] == [1, 1]  # never claimed before
    await store.outbox.settle([(again[0].outbox_id, rejected("HTTP 400"))], AT)
    await store.outbox.retry_rejected("central")
    head = await store.outbox.claim("central", 1)
    await store.close()
    assert [(e.outbox_id, e.attempt) for e in head] == [(again[0].outbox_id, 3)]


async def test_the_settle_runs_on_the_store_thread_when_prepare_begins(tmp_path: Path) -> None:
    # `prepare` (the forwarder's encoder) keeps the loop busy, with a turn of the loop now and
    # then; the outcomes' UPDATE is already running on the store's thread when `prepare` begins
    # (the thread hands the rows read to the loop and goes on to it at once; when it was queued from
    # the loop instead, it waited for the interpreter lock until `prepare` ended, the loop taking
    # it back at every turn). Batches of 4,000 rows, so the UPDATE lasts.
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], AT)
    for start in range(0, 13000, 5000):
        await store.record([d(str(n)) for n in range(start, min(13000, start + 5000))])
    first = list(await store.outbox.claim("central", 4000))
    threads: list[int] = []
    await on_thread(store.db, lambda conn: threads.append(threading.get_ident()))
    seen: list[str] = []

    async def prepare(entries: Any) -> None:
        frame = sys._current_frames().get(threads[0])
        while frame is not None:
            seen.append(frame.f_code.co_name)
            frame = frame.f_back
        for _ in range(100):  # Python work holding the lock in slices, as the encoder's
            t = time.perf_counter()
            while time.perf_counter() - t < 0.0003:
                pass
            await asyncio.sleep(0)

    for _ in range(3):  # the statement new, then from sqlite3's cache of statements
        seen.clear()
        nxt, _ = await store.outbox.settle_and_claim_prepared(
            [(e.outbox_id, DELIVERED) for e in first],
            AT,
            "central",
            4000,
            after=first[-1].outbox_id,
            prepare=prepare,
        )
        assert "_settle_on" in seen, seen
        first = list(nxt)
    await store.close()


async def test_a_settle_and_the_claim_made_with_it_are_one_trip_to_the_store_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BEGIN, the head query, the outcomes, the next rows' attempts and COMMIT run as one call on the
    # store's thread: no statement of the transaction waits for a turn of the event loop to be
    # queued. A settle alone is one trip as well.
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.register_upstreams([("central", "none")], AT)
    await store.record([d(str(n)) for n in range(10)])
    first = list(await store.outbox.claim("central", 3))
    trips: list[Any] = []
    run: Callable[..., Awaitable[Any]] = store.db._execute

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(fn)
        return await run(fn, *args, **kwargs)

    monkeypatch.setattr(store.db, "_execute", counted)
    nxt, _ = await store.outbox.settle_and_claim_prepared(
        [(e.outbox_id, DELIVERED) for e in first], AT, "central", 4, after=first[-1].outbox_id
    )
    assert len(trips) == 1
    await store.outbox.settle([(nxt[0].outbox_id, rejected("HTTP 400")), (nxt[1].outbox_id, DELIVERED)], AT)
    assert len(trips) == 2
    monkeypatch.undo()
    await store.close()
    rows = outbox(path)
    assert [rows[e.outbox_id][1:] for e in first] == [("delivered", 1)] * 3
    assert [rows[e.outbox_id][1:] for e in nxt] == [
        ("rejected", 1),
        ("delivered", 1),
        ("pending", 1),
        ("pending", 1),
    ]

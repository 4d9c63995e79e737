"""The first attempt reserved in the record transaction (`Outbox.reserving`): a live row of an
upstream whose forwarder runs in this process is written with `attempts = 1`, handed out as
attempt 1 without a transaction of its own, and claimed as any other row once handed out, after
a restart, or when another writer made it. Real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from deliveries import AT
from deliveries import delivery as d

from agent.core.send_outcome import DELIVERED, retry
from agent.store.store import Store


def attempts(path: Path, upstream: str = "live") -> dict[int, int]:
    with sqlite3.connect(path) as con:
        return dict(con.execute("SELECT outbox_id, attempts FROM outbox WHERE upstream = ?", (upstream,)))


async def opened(path: Path) -> Store:
    store = await Store.open(path)
    await store.register_upstreams([("live", "none"), ("other", "none")], AT)
    store.outbox.reserving.add("live")  # what a running forwarder of `live` does
    return store


async def test_a_reserved_row_goes_as_attempt_1_without_a_claim_transaction(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await opened(path)
    try:
        await store.record([d("1"), d("2")])
        assert set(attempts(path).values()) == {1}  # committed with the rows
        assert set(attempts(path, "other").values()) == {0}  # no forwarder of its own here
        before = store.commits
        entries = await store.outbox.claim("live", 10)
        assert store.commits == before  # no transaction: the attempt was counted with the record
        assert [e.attempt for e in entries] == [1, 1, 1]  # two transitions and the boot
        assert set(attempts(path).values()) == {1}
        others = await store.outbox.claim("other", 10)
        assert store.commits == before + 1 and {e.attempt for e in others} == {1}
        # Handed out once: a retry is attempt 2 and counted in a transaction as always.
        ids = [e.outbox_id for e in entries]
        await store.outbox.settle([(ids[0], retry("timeout"))] + [(i, DELIVERED) for i in ids[1:]], AT)
        again = await store.outbox.claim("live", 10)
        assert [(e.outbox_id, e.attempt) for e in again] == [(ids[0], 2)]
        assert attempts(path)[ids[0]] == 2
    finally:
        await store.close()


async def test_after_a_restart_a_reserved_row_never_handed_out_is_attempt_2(tmp_path: Path) -> None:
    """The process may have sent it before it died: the next attempt number, as after a crash
    between a claim and its send (contract section 4)."""
    path = tmp_path / "s.db"
    store = await opened(path)
    await store.record([d("1")])
    await store.close()
    store = await opened(path)  # a new process: nothing is reserved in its memory
    try:
        entries = await store.outbox.claim("live", 10)
        assert {e.attempt for e in entries} == {2}
        await store.record([d("2")])  # this process's own row: attempt 1
        fresh = await store.outbox.claim("live", 10, after=max(e.outbox_id for e in entries))
        assert [e.attempt for e in fresh] == [1]
    finally:
        await store.close()


async def test_a_row_another_writer_made_after_the_reserved_ones_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await opened(path)
    try:
        await store.record([d("1")])
        with sqlite3.connect(path) as con:  # e.g. an operator's replay or an import: attempts 0
            con.execute(
                "INSERT INTO outbox(upstream, kind, ref_id, created_at) VALUES ('live', 'transition', 999, ?)",
                (AT,),
            )
        before = store.commits
        entries = await store.outbox.claim("live", 10)
        assert [e.attempt for e in entries] == [1, 1, 1]
        assert store.commits == before + 1  # the other writer's row needed its attempt counted
        assert set(attempts(path).values()) == {1}
    finally:
        await store.close()


async def test_settle_and_claim_hands_reserved_rows_out_as_attempt_1_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await opened(path)
    try:
        await store.record([d("1")])
        first = await store.outbox.claim("live", 10)
        with sqlite3.connect(path) as con:  # another writer's row between two of ours
            con.execute(
                "INSERT INTO outbox(upstream, kind, ref_id, created_at) VALUES ('live', 'transition', 999, ?)",
                (AT,),
            )
        await store.record([d("2")])
        last = max(e.outbox_id for e in first)
        nxt, _ = await store.outbox.settle_and_claim_prepared(
            [(e.outbox_id, DELIVERED) for e in first], AT, "live", 10, after=last
        )
        got = {e.ref_id: e.attempt for e in nxt}
        assert set(got.values()) == {1} and 999 in got
        assert set(attempts(path).values()) == {1}  # 999 counted once, the reserved one not again
        # Both handed out now: claimed again (a rewind), each is attempt 2.
        again = await store.outbox.claim("live", 10)
        assert {e.attempt for e in again} == {2}
    finally:
        await store.close()

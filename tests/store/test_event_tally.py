"""The event tally (agent.store.tally): re-deliveries of stored events are appended and folded
into `events` in bulk, and every reader sees the counts the row-per-batch UPDATE gave.

The same deliveries are recorded with the tally folded after every batch (what the UPDATE of
each batch wrote) and left unfolded; the report, the prune plan and pruning must not tell the
two apart, and after the writer closes the rows of `events` are the same."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.retention import RetentionSettings
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.core.timestamps import format_timestamp
from agent.store import report, tally
from agent.store.prune import prune
from agent.store.prune_plan import plan
from agent.store.reader import Reader
from agent.store.schema import MIGRATIONS, TALLY_MIGRATION
from agent.store.store import Store

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = RetentionSettings(
    arrivals=timedelta(days=30), payloads=timedelta(days=90), keys=timedelta(days=400)
)


def at(days: float) -> str:
    return format_timestamp(T0 + timedelta(days=days))


def d(tid: str, day: float, v: int = 1) -> Delivery:
    obj = {"source": "PUMP-07/Trip", "transitionId": tid, "bootId": "B1", "payload": {"v": v}}
    got = parse_delivery(json.dumps(obj), arrival_at=at(day), receiver="test")
    assert isinstance(got, Delivery)
    return got


# Batches: new keys, then repeats of stored keys (later, earlier than the first arrival, a
# conflict, several repeats of one key in a batch, a repeat of a key made in the same batch).
BATCHES: list[list[Delivery]] = [
    [d("1", 1), d("2", 1), d("3", 2)],
    [d("1", 3), d("2", 4), d("2", 5), d("4", 5), d("4", 6)],
    [d("1", 0.5), d("3", 7, v=2), d("2", 8), d("4", 2)],
    [d("1", 9), d("1", 9), d("2", 9), d("5", 9)],
]


async def events_report(store: Store) -> list[dict[str, Any]]:
    return [e async for e in report.events(store.db, "id")]


def events_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT * FROM events ORDER BY canonical_id").fetchall()


async def record_all(path: Path, batches: Sequence[list[Delivery]], fold_each: bool) -> Store:
    store = await Store.open(path)
    await store.register_upstreams([("mqtt", "none")], at(0))
    for batch in batches:
        await store.record(batch)
        if fold_each:
            async with store._lock, store._transaction():
                await tally.fold_async(store.db)
    return store


async def test_readers_see_the_tallied_counts_and_close_folds_them(tmp_path: Path) -> None:
    folded = await record_all(tmp_path / "folded.db", BATCHES, fold_each=True)
    tallied = await record_all(tmp_path / "tallied.db", BATCHES, fold_each=False)
    try:
        assert await tally.tally_waiting(tallied.db)
        assert await events_report(tallied) == await events_report(folded)
        async with await Reader.open(tmp_path / "tallied.db") as reader:
            by_reader = [e async for e in reader.events("state")]
        assert by_reader == [e async for e in report.events(folded.db, "state")]
        now = T0 + timedelta(days=200)
        got, want = await plan(tallied, SETTINGS, now), await plan(folded, SETTINGS, now)
        assert {k: v.as_dict() for k, v in got.items()} == {k: v.as_dict() for k, v in want.items()}
    finally:
        await folded.close()
        await tallied.close()
    assert events_rows(tmp_path / "tallied.db") == events_rows(tmp_path / "folded.db")
    with sqlite3.connect(tmp_path / "tallied.db") as con:
        assert con.execute("SELECT count(*) FROM event_tally").fetchone()[0] == 0
    first = events_rows(tmp_path / "tallied.db")[0]
    assert first[9:14] == (4, 0, at(0.5), at(9), 1)  # repeats, conflicts, first and last arrival, first id


async def test_a_full_tally_is_folded_in_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tally, "FOLD_ROWS", 2)
    store = await record_all(tmp_path / "s.db", BATCHES, fold_each=False)
    try:
        rows = await store.db.execute_fetchall("SELECT count(*) FROM event_tally")
        assert next(iter(rows))[0] < 2
    finally:
        await store.close()
    plain = await record_all(tmp_path / "plain.db", BATCHES, fold_each=True)
    await plain.close()
    assert events_rows(tmp_path / "s.db") == events_rows(tmp_path / "plain.db")


async def test_pruning_folds_the_tally_before_its_rules_read_the_counts(tmp_path: Path) -> None:
    stores = [
        await record_all(tmp_path / f"{n}.db", BATCHES, fold_each=n == "folded")
        for n in ("folded", "tallied")
    ]
    try:
        for store in stores:
            async with store._lock, store._transaction():
                await store.db.execute("UPDATE outbox SET state = 'delivered', sent_at = ?", (at(9),))
        for now in (T0 + timedelta(days=35), T0 + timedelta(days=120)):
            totals = [await prune(s, SETTINGS, now) for s in stores]
            assert [(t.arrivals, t.payloads) for t in totals] == [
                (totals[0].arrivals, totals[0].payloads)
            ] * 2
        assert totals[0].payloads > 0
        keys = [list(await s.db.execute_fetchall("SELECT * FROM event_keys ORDER BY 1")) for s in stores]
        assert keys[0] == keys[1]
    finally:
        for store in stores:
            await store.close()


async def test_a_store_made_before_the_tally_opens_with_its_data(tmp_path: Path) -> None:
    # The older version counted every repeat in the batch's own rows: one batch, repeats inside it.
    older = [BATCHES[0] + BATCHES[1], *BATCHES[2:]]
    path = tmp_path / "old.db"
    old = await Store.open(path, migrations=MIGRATIONS[: MIGRATIONS.index(TALLY_MIGRATION)])
    await old.record(older[0])
    await old.close()
    with sqlite3.connect(path) as con:  # as the older version's pruning would have left it
        con.execute("DELETE FROM arrivals WHERE canonical_id = 1")
        con.execute(
            "DELETE FROM arrivals WHERE arrival_id = (SELECT max(arrival_id) FROM arrivals"
            " WHERE canonical_id = 2)"
        )
    before = events_rows(path)
    store = await Store.open(path)
    try:
        rows = await store.db.execute_fetchall(
            "SELECT canonical_id, duplicate_count, pruned_arrivals FROM events ORDER BY 1"
        )
        assert [tuple(r) for r in rows] == [(1, 1, 1), (2, 2, 1), (3, 0, 0), (4, 1, 0)]
        for batch in older[1:]:
            await store.record(batch)
    finally:
        await store.close()
    plain = await record_all(tmp_path / "plain.db", older, fold_each=True)
    await plain.close()
    assert [r[:15] for r in events_rows(path)[: len(before)]] != [r[:15] for r in before]  # counted on
    assert [r[:15] for r in events_rows(path)] == [r[:15] for r in events_rows(tmp_path / "plain.db")]
    with sqlite3.connect(path) as con:
        indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "arrivals_by_canonical" not in indexes


async def test_an_event_goes_once_its_last_arrival_is_pruned(tmp_path: Path) -> None:
    store = await record_all(tmp_path / "s.db", BATCHES, fold_each=False)
    try:
        async with store._lock, store._transaction():
            await store.db.execute("UPDATE outbox SET state = 'delivered', sent_at = ?", (at(9),))
        # on day 8.5 the arrivals before day 8 go: event 4 (last arrival day 6) loses all of its
        # and goes; events 1, 2 and 5 keep those of days 8 and 9; the conflict (3) keeps its own,
        # and event 1 its first arrival (the evidence of the boot B1) for ever
        short = RetentionSettings(
            arrivals=timedelta(days=0.5), payloads=timedelta(days=0.5), keys=SETTINGS.keys
        )
        first = await prune(store, short, T0 + timedelta(days=8.5))
        assert (first.arrivals, first.payloads) == (8, 1)
        rows = await store.db.execute_fetchall(
            "SELECT canonical_id, duplicate_count - pruned_arrivals, (SELECT count(*) FROM arrivals a"
            " WHERE a.canonical_id = e.canonical_id AND a.arrival_id <> e.first_arrival_id) FROM events e"
        )
        assert all(r[1] == r[2] for r in rows), rows
        last = await prune(store, short, T0 + timedelta(days=20))
        left = await store.db.execute_fetchall("SELECT canonical_id FROM events ORDER BY 1")
        assert last.payloads == 2 and [r[0] for r in left] == [1, 3]
    finally:
        await store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 7), st.integers(0, 1), st.integers(0, 40)), min_size=1, max_size=6),
        min_size=1,
        max_size=6,
    ),
    fold_rows=st.sampled_from([1, 3, 20_000]),
    now_day=st.integers(0, 150),
)
async def test_any_batches_read_the_same_tallied_or_folded(
    batches: list[list[tuple[int, int, int]]], fold_rows: int, now_day: int
) -> None:
    """Property: whatever the batches and the fold threshold, the report and the prune plan of a
    tallied store are those of a store folded after every batch, and so are the rows once closed."""
    made = [[d(str(tid), day, v) for tid, v, day in batch] for batch in batches]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "folded.db", Path(tmp) / "tallied.db"]
        original = tally.FOLD_ROWS
        tally.FOLD_ROWS = fold_rows
        try:
            stores = [await record_all(p, made, fold_each=i == 0) for i, p in enumerate(paths)]
        finally:
            tally.FOLD_ROWS = original
        try:
            reports = [[e async for e in report.events(s.db, "state")] for s in stores]
            assert reports[0] == reports[1]
            now = T0 + timedelta(days=now_day)
            plans = [{k: v.as_dict() for k, v in (await plan(s, SETTINGS, now)).items()} for s in stores]
            assert plans[0] == plans[1]
        finally:
            for s in stores:
                await s.close()
        assert events_rows(paths[0]) == events_rows(paths[1])

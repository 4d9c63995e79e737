"""The store on real SQLite files: generations, outbox, migrations, a full disk, reopening."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agent.core.contract import Anomaly, Delivery
from agent.core.decide import BootSighting
from agent.core.errors import StoreError, StoreFull
from agent.core.intake import parse_delivery
from agent.core.records import BootObserved, ChannelAnomaly, IdentityIncomplete, Transition
from agent.core.send_outcome import DELIVERED, rejected, retry
from agent.store import report
from agent.store.schema import MIGRATIONS
from agent.store.store import Store


def d(
    tid: str,
    boot: str | None,
    *,
    source: str = "PUMP-07/Trip",
    live: bool = True,
    at: str = "2026-04-22T08:00:00.000Z",
    payload: dict[str, Any] | None = None,
) -> Delivery:
    obj: dict[str, Any] = {"source": source, "transitionId": tid, "payload": payload or {"state": "Trip"}}
    if boot is not None:
        obj["bootId"] = boot
    got = parse_delivery(json.dumps(obj), arrival_at=at, receiver="test")
    assert isinstance(got, Delivery)
    if not live:
        got = Delivery(
            **{**{f: getattr(got, f) for f in got.__dataclass_fields__ if f != "key"}, "live": False}
        )
    return got


async def boots_of(store: Store) -> list[tuple[str, str, str | None, bool]]:
    return [(b["device"], b["bootId"], b["previous_bootId"], b["live"]) async for b in report.boots(store.db)]


async def test_restart_records_one_boot_observed_with_previous(store: Store) -> None:
    await store.record([d("1", "B17"), d("2", "B17")])
    await store.record([d("1", "B18")])
    assert await boots_of(store) == [("PUMP-07", "B17", None, True), ("PUMP-07", "B18", "B17", True)]


async def test_buffered_data_of_an_old_boot_stays_in_its_generation(store: Store) -> None:
    """Poller scenario P5: ring entries of B18 arrive after B19 was seen live."""
    await store.record([d("1", "B18")])
    await store.record([d("1", "B19")])
    outcomes = await store.record([d("2", "B18", live=False), d("3", "B18", live=False)])
    assert [o.decision.value for o in outcomes] == ["inserted", "inserted"]
    assert await boots_of(store) == [("PUMP-07", "B18", None, True), ("PUMP-07", "B19", "B18", True)]
    keys = {(e["transitionId"], e["bootId"]) async for e in report.events(store.db)}
    assert keys == {("1", "B18"), ("1", "B19"), ("2", "B18"), ("3", "B18")}


async def test_incomplete_identity_never_makes_a_boot(store: Store) -> None:
    outcomes = await store.record([d("1", None), d("2", None)])
    assert [o.decision.value for o in outcomes] == ["identity_incomplete"] * 2
    assert await boots_of(store) == []
    assert len([p async for p in report.pending(store.db)]) == 2


async def test_a_boot_read_from_the_controller_is_recorded_with_its_evidence(store: Store) -> None:
    sighting = BootSighting(
        "PUMP-07",
        "B17",
        "2026-04-22T08:00:00.000Z",
        None,
        True,
        {"summary": "boot register 0 read", "register": 0},
    )
    await store.record([], boot_sightings=[sighting], now="2026-04-22T08:00:00.000Z")
    boots = [b async for b in report.boots(store.db)]
    assert boots[0]["evidence"]["register"] == 0 and boots[0]["arrival_id"] is None


async def test_outbox_rows_are_written_with_the_canonical(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none"), ("backup", "none")], "2026-04-22T08:00:00.000Z")
    await store.record(
        [d("1", "B17"), d("1", "B17"), d("2", None)],
        anomalies=[Anomaly("PUMP-07/Trip", "B17", "gap", "2", "3", "2026-04-22T08:00:00.000Z")],
    )
    rows = await store.db.execute_fetchall("SELECT upstream, kind FROM outbox ORDER BY outbox_id")
    await store.close()
    kinds = sorted(rows)
    assert kinds == sorted(
        [
            (u, k)
            for u in ("central", "backup")
            for k in ("transition", "boot_observed", "gap", "identity_incomplete")
        ]
    )


async def test_backfill_all_gives_an_added_upstream_the_history(store: Store) -> None:
    await store.record([d("1", "B17"), d("2", "B17")])
    await store.register_upstreams([("late-none", "none"), ("late-all", "all")], "2026-04-22T09:00:00.000Z")
    rows = dict(
        await store.db.execute_fetchall(
            "SELECT upstream, count(*) FROM outbox WHERE kind = 'transition' GROUP BY upstream"
        )
    )
    assert rows == {"late-all": 2}
    await store.record([d("3", "B17")])
    rows = dict(
        await store.db.execute_fetchall(
            "SELECT upstream, count(*) FROM outbox WHERE kind = 'transition' GROUP BY upstream"
        )
    )
    assert rows == {"late-all": 3, "late-none": 1}


async def test_data_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await Store.open(path)
    await store.record([d("1", "B17")])
    await store.close()
    store = await Store.open(path)
    outcomes = await store.record([d("1", "B17"), d("2", "B17")])
    summary = await report.summary(store.db)
    await store.close()
    assert [o.decision.value for o in outcomes] == ["duplicate", "inserted"]
    assert (summary["source_events"], summary["arrivals"], summary["boots"]) == (2, 3, 1)


async def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await (await Store.open(path)).close()  # created at the latest version
    last = MIGRATIONS[-1][0]
    broken = [
        *MIGRATIONS,
        (last + 1, "broken", ["CREATE TABLE fine(x)", "CREATE TABLE oops(syntax error here"]),
    ]
    with pytest.raises(StoreError, match=f"migration {last + 1}"):
        await Store.open(path, migrations=broken)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == last
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'fine'").fetchone()[0] == 0
    con.close()


async def test_a_full_store_fails_loudly_and_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await Store.open(path, max_bytes=256 * 1024)
    committed = 0
    with pytest.raises(StoreFull, match="full"):
        for n in range(10_000):
            batch = [d(f"{n}-{i}", "B17", payload={"pad": "x" * 400}) for i in range(50)]
            await store.record(batch)
            committed += len(batch)
    # The connection is still usable and consistent after the failed batch.
    summary = await report.summary(store.db)
    assert summary["arrivals"] == committed and summary["source_events"] == committed
    await store.close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT count(*) FROM arrivals").fetchone()[0] == committed
    con.close()


async def test_a_file_that_is_not_a_store_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "not.db"
    path.write_bytes(b"this is a text file, not SQLite" * 100)
    with pytest.raises(StoreError, match="damaged or is not"):
        await Store.open(path)


async def test_claim_after_an_id_takes_the_next_pending_rows_and_counts_their_attempt(tmp_path: Path) -> None:
    # A forwarder claims the next rows while the rows it claimed before are still in flight
    # (and so still pending): `after` must skip them, and every claim still counts an attempt.
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record([d(str(n), "B17") for n in range(6)])  # 6 transitions + 1 boot_observed
    first = await store.outbox.claim("central", 3)
    second = await store.outbox.claim("central", 3, after=first[-1].outbox_id)
    third = await store.outbox.claim("central", 3, after=second[-1].outbox_id)
    again = await store.outbox.claim("central", 2)  # from the head: the first rows, next attempt
    await store.close()
    ids = [e.outbox_id for e in first + second + third]
    assert ids == sorted(ids) and len(set(ids)) == 7
    assert [e.attempt for e in first + second + third] == [1] * 7
    assert [(e.outbox_id, e.attempt) for e in again] == [(e.outbox_id, 2) for e in first[:2]]


async def test_settle_and_claim_commits_the_outcomes_and_the_next_attempts_together(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record([d(str(n), "B17") for n in range(6)])  # 6 transitions + 1 boot_observed
    first = await store.outbox.claim("central", 3)
    second = await store.outbox.claim("central", 2, after=first[-1].outbox_id)
    outcomes = [DELIVERED, rejected("refused"), retry("timeout")]
    third, _ = await store.outbox.settle_and_claim_prepared(
        [(e.outbox_id, oc) for e, oc in zip(first, outcomes, strict=True)],
        "2026-04-22T08:00:01.000Z",
        "central",
        5,
        after=second[-1].outbox_id,
    )
    await store.close()
    assert [e.outbox_id for e in third] == list(range(second[-1].outbox_id + 1, first[0].outbox_id + 7))
    with sqlite3.connect(tmp_path / "s.db") as con:
        rows = con.execute("SELECT state, attempts, last_error FROM outbox ORDER BY outbox_id").fetchall()
    assert rows[:3] == [("delivered", 1, None), ("rejected", 1, "refused"), ("pending", 1, "timeout")]
    assert rows[3:] == [("pending", 1, None)] * 4  # the second batch and the two rows just claimed


async def test_settle_and_claim_prepared_hands_the_next_rows_over_before_their_commit_and_returns_after(
    tmp_path: Path,
) -> None:
    # The forwarder encodes the next rows while the batch before them is settled: `prepare` gets
    # exactly the rows returned, with the attempt numbers that are committed when it returns.
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record([d(str(n), "B17") for n in range(6)])  # 6 transitions + 1 boot_observed
    first = await store.outbox.claim("central", 3)
    seen: list[list[tuple[int, int]]] = []

    async def prepare(entries: list[Any]) -> str:
        seen.append([(e.outbox_id, e.attempt) for e in entries])
        return "made"

    nxt, made = await store.outbox.settle_and_claim_prepared(
        [(e.outbox_id, DELIVERED) for e in first],
        "2026-04-22T08:00:01.000Z",
        "central",
        10,
        after=first[-1].outbox_id,
        prepare=prepare,
    )
    await store.close()
    assert made == "made"
    assert seen == [[(e.outbox_id, e.attempt) for e in nxt]]
    assert [e.outbox_id for e in nxt] == list(range(first[-1].outbox_id + 1, first[0].outbox_id + 7))
    with sqlite3.connect(tmp_path / "s.db") as con:
        rows = con.execute("SELECT outbox_id, state, attempts FROM outbox ORDER BY outbox_id").fetchall()
    assert [r[1:] for r in rows[:3]] == [("delivered", 1)] * 3
    assert [(r[0], r[2]) for r in rows[3:]] == [(e.outbox_id, e.attempt) for e in nxt]
    assert all(r[1] == "pending" for r in rows[3:])


async def test_settle_and_claim_prepared_that_fails_commits_neither_and_raises(tmp_path: Path) -> None:
    # `prepare` may already have run on the next rows when the commit fails: the error is
    # raised (what it made is not returned), nothing is committed, and the rows stay pending.
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record([d(str(n), "B17") for n in range(4)])
    first = await store.outbox.claim("central", 2)
    with sqlite3.connect(tmp_path / "s.db") as con:  # counting the next attempts fails
        con.execute(
            "CREATE TRIGGER no_attempts BEFORE UPDATE OF attempts ON outbox BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
    prepared: list[int] = []

    async def prepare(entries: list[Any]) -> None:
        prepared.extend(e.outbox_id for e in entries)

    with pytest.raises(StoreError):
        await store.outbox.settle_and_claim_prepared(
            [(e.outbox_id, DELIVERED) for e in first],
            "2026-04-22T08:00:01.000Z",
            "central",
            5,
            after=first[-1].outbox_id,
            prepare=prepare,
        )
    # The store is usable afterwards (the transaction ended, the lock was let go).
    assert [c.pending for c in await store.outbox.counts()] == [5]
    await store.close()
    with sqlite3.connect(tmp_path / "s.db") as con:
        rows = con.execute("SELECT state, attempts FROM outbox ORDER BY outbox_id").fetchall()
    assert rows == [("pending", 1)] * 2 + [("pending", 0)] * 3  # the acknowledged rows go out again


async def test_a_claimed_transition_whose_record_is_gone_has_none(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record([d("1", "B17"), d("2", "B17")])
    await store.close()
    with sqlite3.connect(tmp_path / "s.db") as con:
        con.execute("PRAGMA foreign_keys=OFF")
        con.execute("DELETE FROM events WHERE transition_id = '1'")
    store = await Store.open(tmp_path / "s.db")
    entries = await store.outbox.claim("central", 10)
    await store.close()
    got = [
        (e.kind, e.record.transition_id if isinstance(e.record, Transition) else e.record) for e in entries
    ]
    assert [g for g in got if g[0] == "transition"] == [("transition", None), ("transition", "2")]


async def test_claim_returns_every_kind_with_its_record(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("central", "none")], "2026-04-22T08:00:00.000Z")
    await store.record(
        [d("1", "B17"), d("2", None)],
        anomalies=[Anomaly("PUMP-07/Trip", "B17", "gap", "2", "3", "2026-04-22T08:00:00.000Z")],
    )
    entries = await store.outbox.claim("central", 10)
    await store.close()
    got = {e.kind: e.record for e in entries}
    assert sorted(got) == ["boot_observed", "gap", "identity_incomplete", "transition"]
    assert isinstance(got["transition"], Transition) and got["transition"].transition_id == "1"
    assert isinstance(got["boot_observed"], BootObserved) and got["boot_observed"].boot_id == "B17"
    assert isinstance(got["gap"], ChannelAnomaly) and (got["gap"].from_value, got["gap"].to_value) == (
        "2",
        "3",
    )
    assert isinstance(got["identity_incomplete"], IdentityIncomplete)
    assert json.loads(got["identity_incomplete"].raw)["transitionId"] == "2"

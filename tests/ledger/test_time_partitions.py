"""Time partitions of `arrival` and `notification` (migration 0007, docs/retention.md) on a real
PostgreSQL, on both layouts (plain, and partitioned_by_source: range by time, then hash by source):
made ahead by the ledger, rows written before a partition existed moved into it, a partition past
its retention period archived (one file per partition, verified) then truncated and dropped, the
rows it must keep kept in it, an archive that fails stops the drop, `--dry-run` names what would go,
and a pruned key's re-delivery is still `duplicate` or `conflict`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_ledger_cli import ledger
from test_retention_prune import archived_rows, ids, line, record, scalar, settings

from agent.core.intake import parse_delivery
from agent.ledger import arbiter, archive, layout, prune, retention_state, time_partitions
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.connection import connect
from agent.ledger.retention_config import DAY, RetentionSettings

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
NOW = datetime.now(UTC).replace(microsecond=0)
M1 = time_partitions.period_start(NOW - timedelta(days=130), "month")  # two past months
M2 = time_partitions.next_start(M1, "month")
M3 = time_partitions.next_start(M2, "month")
ARRIVALS_30D = 30 * DAY  # M1 and M2 are wholly past this, the current month is not


@pytest.fixture(params=["plain", "by_source"])
async def conn(request: pytest.FixtureRequest, ledger_dsn: str) -> AsyncIterator[Conn]:
    c = await connect(ledger_dsn)
    try:
        if request.param == "by_source":
            await layout.partition_by_source(c, partitions=4)
        yield c
    finally:
        await c.close()


async def where(conn: Conn, table: str) -> dict[str, int]:
    """Rows per partition (the leaf's parent on the by_source layout)."""
    cur = await conn.execute(
        f"SELECT coalesce(i.inhparent::regclass::text, x.tableoid::regclass::text), count(*) FROM {table} x"
        " LEFT JOIN pg_inherits i ON i.inhrelid = x.tableoid AND i.inhparent <> %s::regclass GROUP BY 1",
        (table,),
    )
    got = {str(k): int(n) for k, n in await cur.fetchall()}
    await conn.rollback()
    return got


async def test_partitions_are_made_ahead_and_rows_go_into_their_period(conn: Conn) -> None:
    made = await time_partitions.ensure(conn, "month", 2, now=NOW)
    start = time_partitions.period_start(NOW, "month")
    names = [time_partitions.name_of("arrival", start)]
    for _ in range(2):
        start = time_partitions.next_start(start, "month")
        names.append(time_partitions.name_of("arrival", start))
    assert set(names) <= set(made) | {p.name for p in await time_partitions.partitions(conn, "arrival")}
    assert await time_partitions.ensure(conn, "month", 2, now=NOW) == [], "made once"
    days = await time_partitions.ensure(conn, "day", 3, now=NOW + timedelta(days=90))
    assert len([d for d in days if d.startswith("arrival_")]) == 4, "a day period beside the months"
    modulus = await time_partitions.hash_modulus(conn)
    cur = await conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", (names[0],))
    assert (await cur.fetchone() or [0])[0] == modulus, "hash sub-partitions by source under each period"
    cur = await conn.execute(
        "SELECT count(*) FROM pg_indexes WHERE indexname LIKE %s AND indexdef LIKE 'CREATE UNIQUE%%'",
        (names[0] + "%arrival_key",),
    )
    assert (await cur.fetchone() or [0])[0] == max(modulus, 1), "every leaf's unique arrival key"
    await conn.rollback()

    assert await record(conn, [line("T1", 1), line("T1", 2)]) == ["inserted", "conflict"]
    assert await where(conn, "arrival") == {names[0]: 2}, "into the current period's partition"
    assert await record(conn, [line("T1", 1)], gateway="gw-2", now=NOW) == ["duplicate"]


async def test_rows_written_before_their_partition_existed_move_into_it(conn: Conn) -> None:
    rules = [NotifyRule("all", "http://127.0.0.1:1/x")]
    assert await record(conn, [line("T1"), line("T2")], now=M1, rules=rules) == ["inserted"] * 2
    assert await where(conn, "arrival") == {"arrival_default": 2}
    made = await time_partitions.ensure(conn, "month", 0, now=M1)
    assert time_partitions.name_of("arrival", M1) in made
    assert await where(conn, "arrival") == {time_partitions.name_of("arrival", M1): 2}, "moved, none lost"
    notes = await where(conn, "notification")
    assert sum(notes.values()) == 2 and time_partitions.name_of("notification", M1) not in notes, "made now()"
    assert await record(conn, [line("T1"), line("T2", 9)], gateway="gw-2", now=M1) == [
        "duplicate",
        "conflict",
    ]
    assert await record(conn, [line("T1")], now=M1) == ["inserted"], "the same delivery: its stored decision"


async def fill_two_past_months(conn: Conn) -> set[int]:
    """M1: T1, T2 inserted (T1's arrival is its boot's evidence: kept); M2: their re-deliveries
    (duplicates: nothing keeps them). Returns the canonical ids."""
    await time_partitions.ensure(conn, "month", 1, now=M1)
    assert await record(conn, [line("T1", 1), line("T2", 2)], now=M1) == ["inserted", "inserted"]
    assert await record(conn, [line("T1", 1), line("T2", 2)], gateway="gw-2", now=M2) == ["duplicate"] * 2
    return await ids(conn, "SELECT id FROM canonical_event")


async def test_a_partition_past_its_period_is_archived_then_dropped_and_its_keys_still_decide(
    conn: Conn, tmp_path: Path
) -> None:
    canonicals = await fill_two_past_months(conn)
    boot_arrival = await ids(conn, "SELECT arrival_id FROM boot")
    p1, p2 = time_partitions.name_of("arrival", M1), time_partitions.name_of("arrival", M2)
    result = await prune.prune(conn, settings(tmp_path, arrivals_s=ARRIVALS_30D), now=NOW)
    got = {p.partition: p for p in result.partitions if p.table == "arrival"}
    assert (got[p1].rows, got[p1].archived, got[p1].kept, got[p1].dropped) == (2, 1, 1, False)
    assert (got[p2].rows, got[p2].archived, got[p2].kept, got[p2].dropped) == (2, 2, 0, True)
    names = {p.name for p in await time_partitions.partitions(conn, "arrival")}
    assert p1 in names and p2 not in names, "the emptied partition dropped, the other keeps its kept row"
    assert await ids(conn, "SELECT id FROM arrival") == boot_arrival, "the boot's evidence stays"
    files = sorted((tmp_path / "archive" / "arrival").glob("*.jsonl.gz"))
    assert [f.name.split("-run")[0] for f in files] == [f"arrival-{p1}", f"arrival-{p2}"], (
        "a file per partition"
    )
    assert all(archive.verify(f) == [] for f in files)
    assert len(archived_rows(tmp_path / "archive", "arrival")) == 3, "every pruned arrival archived"
    assert {s.table: s.pruned for s in result.steps}["arrival"] == 0, "nothing left for row deletes"

    again = await record(conn, [line("T1", 1), line("T2", 999)], gateway="gw-3", now=NOW)
    assert again == ["duplicate", "conflict"], "decided against the first decision, after the drop"
    assert await ids(conn, "SELECT id FROM canonical_event") == canonicals, "never a second canonical"
    state = await retention_state.read(conn)
    assert state["oldest_partition"]["arrival"] == p1
    assert any("oldest partition" in x for x in retention_state.describe(state))


async def test_an_archive_that_fails_stops_the_partition_drop(conn: Conn, tmp_path: Path) -> None:
    await fill_two_past_months(conn)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive directory should be")
    bad = RetentionSettings(str(blocker / "archive"), arrivals_s=ARRIVALS_30D)
    with pytest.raises(archive.ArchiveError, match="could not be written"):
        await prune.prune(conn, bad, now=NOW)
    names = {p.name for p in await time_partitions.partitions(conn, "arrival")}
    assert {time_partitions.name_of("arrival", M1), time_partitions.name_of("arrival", M2)} <= names
    assert await scalar(conn, "SELECT count(*) FROM arrival") == 4, "every row kept"
    assert (
        await scalar(conn, "SELECT outcome FROM retention_run ORDER BY id DESC LIMIT 1") == "archive_failed"
    )


async def test_a_dry_run_names_the_partitions_that_would_go_and_why(conn: Conn, tmp_path: Path) -> None:
    await fill_two_past_months(conn)
    dry = await prune.prune(conn, settings(tmp_path, arrivals_s=ARRIVALS_30D), now=NOW, dry_run=True)
    would = {p.partition: (p.archived, p.kept, p.dropped) for p in dry.partitions if p.table == "arrival"}
    assert would == {
        time_partitions.name_of("arrival", M1): (1, 1, False),
        time_partitions.name_of("arrival", M2): (2, 0, True),
    }
    assert all(p.why and p.setting == "arrivals" for p in dry.partitions if p.table == "arrival")
    assert not (tmp_path / "archive").exists() and await scalar(conn, "SELECT count(*) FROM arrival") == 4
    assert {s.table: s.archived for s in dry.steps}["arrival"] == 0, "nothing row by row: all in partitions"
    state = await retention_state.read(conn)
    assert state["oldest"]["arrival"] == M2, "a period partition's rows count from where it ends"
    done = await prune.prune(conn, settings(tmp_path, arrivals_s=ARRIVALS_30D), now=NOW)
    assert {
        p.partition: (p.archived, p.kept, p.dropped) for p in done.partitions if p.table == "arrival"
    } == would


async def test_notification_partitions_keep_what_is_not_sent(conn: Conn, tmp_path: Path) -> None:
    rules = [NotifyRule("all", "http://127.0.0.1:1/x")]
    await time_partitions.ensure(conn, "month", 0, now=NOW)
    assert await record(conn, [line("T1"), line("T2")], rules=rules) == ["inserted"] * 2
    await conn.execute(
        "UPDATE notification SET state = 'sent', sent_at = now() WHERE id = (SELECT min(id) FROM notification)"
    )
    await conn.commit()
    later = NOW + timedelta(days=31 + 40)  # past this month's end by more than the 30 days
    result = await prune.prune(
        conn, settings(tmp_path, notifications_s=30 * DAY, arrivals_s=400 * DAY), now=later
    )
    this_month = time_partitions.name_of("notification", time_partitions.period_start(NOW, "month"))
    (part,) = [p for p in result.partitions if p.partition == this_month]
    assert (part.archived, part.kept, part.dropped) == (1, 1, False), "the pending one stays"
    assert await scalar(conn, "SELECT state FROM notification") == "pending"


async def test_two_instances_racing_on_one_delivery_record_one_arrival(conn: Conn, ledger_dsn: str) -> None:
    """The arrival key's unique index is on each leaf partition now: the loser of a race is still
    told (its batch retried) and gets the winner's decision, one arrival row."""
    await time_partitions.ensure(conn, "month", 0, now=NOW)
    at = NOW.isoformat().replace("+00:00", "Z")
    batch = [Arrival(parse_delivery(line("T1"), arrival_at=at, receiver="t", line=1), "gw-1", "import")]
    other = await connect(ledger_dsn)
    try:
        async with conn.transaction():
            first = await arbiter.decide_batch(conn, batch, NOW)
            racing = asyncio.create_task(arbiter.record(other, batch, now=NOW))
            await asyncio.sleep(0.5)
            assert not racing.done(), "waits on the winner's uncommitted rows"
        second = await asyncio.wait_for(racing, 30)
    finally:
        await other.close()
    assert [o.decision.value for o in first] == [o.decision.value for o in second] == ["inserted"]
    assert await scalar(conn, "SELECT count(*) FROM arrival") == 1


async def test_prune_dry_run_and_check_name_the_partitions_as_processes(
    conn: Conn, ledger_dsn: str, tmp_path: Path
) -> None:
    await fill_two_past_months(conn)
    cfg = tmp_path / "ledger.yaml"
    cfg.write_text(
        "http: {listen: '127.0.0.1:1'}\n"
        f"retention:\n  archive_dir: {tmp_path / 'archive'}\n  arrivals: 30d\n  partition: month\n"
    )
    p1, p2 = time_partitions.name_of("arrival", M1), time_partitions.name_of("arrival", M2)
    dry = ledger(ledger_dsn, "prune", "-c", str(cfg), "--dry-run").stdout
    assert "time partitions would be taken whole" in dry
    assert f"{p1}: 1 of 2 rows would go, then truncated, 1 kept rows stay in it" in dry
    assert f"{p2}: 2 of 2 rows would go, then dropped" in dry and "(arrivals)" in dry
    done = json.loads(ledger(ledger_dsn, "prune", "-c", str(cfg), "--json").stdout)
    got = {p["partition"]: (p["pruned"], p["dropped"]) for p in done["partitions"] if p["table"] == "arrival"}
    assert got == {p1: (1, False), p2: (2, True)}
    check = ledger(ledger_dsn, "check").stdout
    assert f"oldest partition of arrival: {p1} (rows up to {M2:%Y-%m-%d %H:%M})" in check


def test_the_partition_settings_and_their_errors(tmp_path: Path) -> None:
    from agent.ledger import config

    f = tmp_path / "ledger.yaml"
    f.write_text("http: {listen: '127.0.0.1:1'}\nretention:\n  archive_dir: /a\n")
    r = config.load(f).retention
    assert r is not None and (r.partition, r.partitions_ahead) == ("month", 2)
    f.write_text(
        "http: {listen: '127.0.0.1:1'}\nretention:\n  archive_dir: /a\n  partition: day\n  partitions_ahead: 7\n"
    )
    r = config.load(f).retention
    assert r is not None and (r.partition, r.partitions_ahead) == ("day", 7)
    f.write_text("http: {listen: '127.0.0.1:1'}\nretention:\n  archive_dir: /a\n  partition: week\n")
    with pytest.raises(config.ConfigProblems, match=r":4: retention.partition: must be one of month, day"):
        config.load(f)


async def test_ledger_run_makes_the_partitions_at_its_start(ledger_dsn: str) -> None:
    from agent.ledger.prune_schedule import partitions_every

    stop = asyncio.Event()
    task = asyncio.create_task(partitions_every(ledger_dsn, None, "day", 3, stop, every_s=3600))
    conn = await connect(ledger_dsn)
    try:
        for _ in range(200):
            await asyncio.sleep(0.05)
            if len(await time_partitions.partitions(conn, "notification")) >= 5:
                break
        await conn.rollback()
        stop.set()
        await asyncio.wait_for(task, 10)
        names = {p.name for p in await time_partitions.partitions(conn, "arrival")}
    finally:
        await conn.close()
    today = time_partitions.period_start(datetime.now(UTC), "day")
    assert time_partitions.name_of("arrival", today) in names and len(names) == 5, names


async def test_a_partition_busy_past_the_lock_timeout_is_left_whole_for_the_next_run(
    conn: Conn, ledger_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill_two_past_months(conn)
    monkeypatch.setattr(time_partitions, "LOCK_TIMEOUT", "200ms")
    p1, p2 = time_partitions.name_of("arrival", M1), time_partitions.name_of("arrival", M2)
    reader = await connect(ledger_dsn)
    try:
        await reader.execute(f"SELECT count(*) FROM {p2}".encode())  # a reader's open transaction
        result = await prune.prune(conn, settings(tmp_path, arrivals_s=ARRIVALS_30D), now=NOW)
    finally:
        await reader.close()
    assert [p.partition for p in result.partitions if p.table == "arrival"] == [p1], "p2 left for later"
    assert await scalar(conn, f"SELECT count(*) FROM {p2}") == 2, "every row of the busy partition kept"
    assert {s.table: s.pruned for s in result.steps}["arrival"] == 0, "a period partition's rows go with it"
    files = [f.name for f in (tmp_path / "archive" / "arrival").iterdir()]
    assert not [f for f in files if p2 in f], "its archive file removed again"
    again = await prune.prune(conn, settings(tmp_path, arrivals_s=ARRIVALS_30D), now=NOW)
    assert [(p.partition, p.archived, p.dropped) for p in again.partitions if p.table == "arrival"] == [
        (p1, 0, False),
        (p2, 2, True),
    ]
    assert len(archived_rows(tmp_path / "archive", "arrival")) == 3, "every pruned row archived once"


async def test_ledger_migrate_makes_the_partitions_and_keeps_the_period_in_use(pg_dsn: str) -> None:
    assert "migrated to version" in ledger(pg_dsn, "migrate").stdout
    c = await connect(pg_dsn)
    try:
        months = [p for p in await time_partitions.partitions(c, "arrival") if not p.default]
        assert len(months) == 3 and months[0].lower == time_partitions.period_start(
            datetime.now(UTC), "month"
        )
        # a ledger run with `partition: day` ahead of a month boundary: the period in use is day
        later = time_partitions.next_start(time_partitions.next_start(months[-1].lower, "month"), "month")
        await time_partitions.ensure(c, "day", 0, now=later)
        assert await time_partitions.period_in_use(c) == "day"
    finally:
        await c.close()
    assert "nothing to do" in ledger(pg_dsn, "migrate").stdout


async def test_the_ledgers_connections_never_jit_compile_and_run_in_utc(ledger_dsn: str) -> None:
    # The arrival-key lookup over many time partitions passed jit_above_cost: compiling it cost
    # more than running it (bench/ledger_years.py). Every ledger connection turns JIT off.
    c = await connect(ledger_dsn)
    try:
        cur = await c.execute("SELECT current_setting('jit'), current_setting('TimeZone')")
        assert await cur.fetchone() == ("off", "UTC")
    finally:
        await c.close()

"""Migration 0007 (time partitions) on a ledger of version 6 with rows of every decision, on both
layouts (plain, and partitioned_by_source as it was at version 6): nothing lost, every decision and
id as it was, a re-run batch gets its stored decisions, a re-delivery from another gateway is
`duplicate` or `conflict` against the first decision, new rows go on from the old ids, and the old
table (now the legacy partition) is archived and truncated whole once past its period."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_retention_migration import snapshot
from test_retention_prune import settings
from test_unknown_outcome import EXPECTED, mixed_batch

from agent.ledger import arbiter, migrations, prune, report, review, time_partitions
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.connection import connect
from agent.ledger.retention_config import DAY

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
LAYOUT_V6 = Path(__file__).with_name("layout_v6.sql")  # the partitioned_by_source layout before 0007
RULES = [NotifyRule("all", "http://127.0.0.1:1/x")]


def from_gateway(batch: list[Arrival], gateway: str) -> list[Arrival]:
    """The same deliveries from another gateway: new arrivals (their own keys), the same identities."""
    return [Arrival(a.item, gateway, a.via) for a in batch]


async def at_version_6(conn: Conn, by_source: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    every = migrations.migrations()
    assert every[6].version == 7 and every[6].name == "time_partitions"
    monkeypatch.setattr(migrations, "migrations", lambda: every[:6])
    assert await migrations.migrate(conn) == [1, 2, 3, 4, 5, 6]
    monkeypatch.undo()
    if by_source:
        async with conn.transaction():
            await conn.execute("SELECT set_config('ledger.partitions', '4', true)")
            await conn.execute(LAYOUT_V6.read_bytes())


async def scalar(conn: Conn, query: str) -> Any:
    cur = await conn.execute(query.encode())
    row = await cur.fetchone()
    await conn.rollback()
    return None if row is None else row[0]


@pytest.mark.parametrize("by_source", [False, True], ids=["plain", "by_source"])
async def test_version_6_with_rows_migrates_to_7_losing_nothing_and_keeping_decisions(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, by_source: bool
) -> None:
    conn = await connect(pg_dsn)
    try:
        await at_version_6(conn, by_source, monkeypatch)
        outcomes = await arbiter.record(conn, mixed_batch(), rules=RULES)
        assert [oc.decision.value for oc in outcomes] == EXPECTED
        conflict = await scalar(conn, "SELECT arrival_id FROM conflict LIMIT 1")
        await review.mark(conn, conflict, "checked with the site", "ops")
        before = await snapshot(conn)
        cur = await conn.execute("SELECT * FROM notification ORDER BY id")
        notes = await cur.fetchall()
        await conn.rollback()
        last_arrival = await scalar(conn, "SELECT max(id) FROM arrival")

        assert await migrations.migrate(conn) == [7]
        await migrations.check(conn)
        assert await snapshot(conn) == before, "every row and decision as it was"
        cur = await conn.execute("SELECT * FROM notification ORDER BY id")
        assert await cur.fetchall() == notes, "the outbox as it was"
        await conn.rollback()
        parts = await time_partitions.partitions(conn, "arrival")
        assert [p.name for p in parts] == ["arrival_default", "arrival_legacy"]
        assert await scalar(conn, "SELECT count(*) FROM arrival_legacy") == before["arrival"]

        again = await arbiter.record(conn, mixed_batch())  # the same text: the stored decisions
        assert [oc.decision.value for oc in again] == EXPECTED
        assert await snapshot(conn) == before, "a re-run adds nothing"
        other = await arbiter.record(conn, from_gateway(mixed_batch(), "gw-other"), rules=RULES)
        firsts = {oc.canonical_id for oc in outcomes if oc.canonical_id is not None}
        for first, later in zip(outcomes, other, strict=True):
            if first.decision.value in ("inserted", "duplicate", "conflict"):
                assert later.decision.value in ("duplicate", "conflict")
                assert later.canonical_id == first.canonical_id, "against the first decision"
        assert await scalar(conn, "SELECT count(*) FROM canonical_event") == before["canonical_event"]
        assert {oc.canonical_id for oc in other if oc.canonical_id is not None} <= firsts
        assert await scalar(conn, "SELECT min(id) FROM arrival WHERE gateway = 'gw-other'") > last_arrival
        summary = await report.summary(conn)
        assert summary["source_events"] == before["canonical_event"]

        made = await time_partitions.ensure(conn, "month", 1)
        assert made and all(not m.endswith("_legacy") for m in made), "periods after the legacy partition"
        later = datetime.now(UTC) + timedelta(days=200)
        result = await prune.prune(conn, settings(tmp_path, arrivals_s=90 * DAY), now=later)
        (legacy,) = [p for p in result.partitions if p.partition == "arrival_legacy"]
        assert legacy.pruned == legacy.archived and legacy.kept > 0, "kept rows stay, the rest archived"
        assert legacy.rows == before["arrival"] + len(other)
        assert await scalar(conn, "SELECT count(*) FROM arrival") == legacy.kept
        assert await scalar(conn, "SELECT count(*) FROM canonical_event") == before["canonical_event"]
        last = await arbiter.record(conn, from_gateway(mixed_batch(), "gw-third"), now=later)
        assert [oc.canonical_id for oc in last] == [oc.canonical_id for oc in other], "still decided alike"
    finally:
        await conn.close()


async def test_the_legacy_partition_goes_row_by_row_until_it_is_past_its_period(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conn = await connect(pg_dsn)
    try:
        await at_version_6(conn, False, monkeypatch)
        await arbiter.record(conn, mixed_batch())
        await arbiter.record(conn, from_gateway(mixed_batch(), "gw-other"))
        assert await migrations.migrate(conn) == [7]
        await time_partitions.ensure(conn, "month", 1)
        total = await scalar(conn, "SELECT count(*) FROM arrival")
        soon = datetime.now(UTC) + timedelta(days=2)  # the legacy partition ends at a month's start
        result = await prune.prune(conn, settings(tmp_path, arrivals_s=1 * DAY), now=soon)
        assert not [p for p in result.partitions if p.table == "arrival"], "not past its period yet"
        steps = {s.table: s for s in result.steps}
        assert steps["arrival"].pruned > 0 and steps["arrival"].pruned == steps["arrival"].archived
        left = await scalar(conn, "SELECT count(*) FROM arrival_legacy")
        assert left == total - steps["arrival"].pruned and left > 0, "the kept ones stay"
        again = await arbiter.record(conn, from_gateway(mixed_batch(), "gw-third"), now=soon)
        assert {oc.decision.value for oc in again} <= {
            "duplicate",
            "conflict",
            "identity_incomplete",
            "rejected",
        }
        assert await scalar(conn, "SELECT count(*) FROM canonical_event") == 1
    finally:
        await conn.close()

"""Migration 0006 (retention) on a ledger of version 5 with rows of every decision: nothing lost,
every decision kept, and the arbiter decides a re-delivery against the migrated rows."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from test_unknown_outcome import EXPECTED, mixed_batch

from agent.ledger import arbiter, migrations, report
from agent.ledger.connection import connect

TABLES = (
    "canonical_event",
    "arrival",
    "conflict",
    "pending",
    "boot",
    "anomaly",
    "notification",
    "review_mark",
)


async def snapshot(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in TABLES:
        cur = await conn.execute(f"SELECT count(*) FROM {t}".encode())
        out[t] = (await cur.fetchone())[0]  # type: ignore[index]
    cur = await conn.execute("SELECT id, decision, canonical_id, payload_hash FROM arrival ORDER BY id")
    out["decisions"] = await cur.fetchall()
    cur = await conn.execute("SELECT id, payload, payload_hash FROM canonical_event ORDER BY id")
    out["canonicals"] = await cur.fetchall()
    await conn.rollback()
    return out


async def test_version_5_with_rows_migrates_to_6_losing_nothing_and_keeping_decisions(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = migrations.migrations()
    assert every[5].version == 6 and every[5].name == "retention"
    conn = await connect(pg_dsn)
    try:
        monkeypatch.setattr(migrations, "migrations", lambda: every[:5])
        assert await migrations.migrate(conn) == [1, 2, 3, 4, 5]
        monkeypatch.undo()
        outcomes = await arbiter.record(conn, mixed_batch())
        assert [oc.decision.value for oc in outcomes] == EXPECTED
        before = await snapshot(conn)

        monkeypatch.setattr(migrations, "migrations", lambda: every[:6])
        assert await migrations.migrate(conn) == [6]
        await migrations.check(conn)
        monkeypatch.undo()
        assert await snapshot(conn) == before, "every row and decision as it was"
        again = await arbiter.record(conn, mixed_batch()[:3])  # the same text: the stored decisions
        assert [oc.decision.value for oc in again] == EXPECTED[:3]
        summary = await report.summary(conn)
        assert summary["beyond_horizon"] == 0 and summary["source_events"] == before["canonical_event"]
    finally:
        await conn.close()

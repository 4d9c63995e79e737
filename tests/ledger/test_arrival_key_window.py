"""Arrival keys are looked up over the arrivals' retention period only (`retention.arrivals`, the
`keys_s` of `arbiter.record`): a re-run after an unknown COMMIT (seconds later) still gives the
first decisions and adds no arrival; a delivery whose first arrival is older than the period (it
is pruned with its raw line anyway) is recorded as an arrival again, decided against the
canonical event: never a second canonical, never dropped. Without a period: every partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from test_unknown_outcome import EXPECTED, mixed_batch

from agent.ledger import arbiter, retention_state, time_partitions

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
DAY = 86400.0


async def count(conn: Conn, table: str) -> int:
    cur = await conn.execute(f"SELECT count(*) FROM {table}")
    row = await cur.fetchone()
    await conn.rollback()
    assert row is not None
    return int(row[0])


async def decisions(conn: Conn, keys_s: float | None) -> list[str]:
    return [o.decision.value for o in await arbiter.record(conn, mixed_batch(), keys_s=keys_s)]


async def test_a_rerun_inside_the_period_adds_nothing_and_an_older_one_is_a_new_arrival(
    ledger_conn: Conn,
) -> None:
    now = datetime.now(UTC)
    await time_partitions.ensure(ledger_conn, "month", 0, now=now - timedelta(days=100))
    await time_partitions.ensure(ledger_conn, "month", 1, now=now)
    assert await decisions(ledger_conn, 90 * DAY) == EXPECTED
    arrivals, canonicals = await count(ledger_conn, "arrival"), await count(ledger_conn, "canonical_event")
    assert await decisions(ledger_conn, 90 * DAY) == EXPECTED, "a re-run: the first decisions"
    assert await count(ledger_conn, "arrival") == arrivals, "and no second arrival"

    # The first arrivals were received 100 days ago (older than the 90-day period): moved into the
    # partition of that month.
    await ledger_conn.execute("UPDATE arrival SET received_at = received_at - interval '100 days'")
    await ledger_conn.commit()
    assert await decisions(ledger_conn, None) == EXPECTED, "without a period every partition is read"
    assert await count(ledger_conn, "arrival") == arrivals

    again = await decisions(ledger_conn, 90 * DAY)
    assert again == [
        "duplicate",  # gw-a's T1 again: its canonical is there, so a duplicate of it, not a new one
        "duplicate",
        "conflict",
        "identity_incomplete",  # no boot id: still never made up
        "rejected",
        "duplicate",  # the boot and the gap: their records are kept once
        "duplicate",
    ]
    assert await count(ledger_conn, "arrival") == 2 * arrivals, "each delivery recorded again"
    assert await count(ledger_conn, "canonical_event") == canonicals, "never a second canonical"


async def test_import_takes_the_period_of_the_last_prune(ledger_conn: Conn) -> None:
    assert await retention_state.stored_periods(ledger_conn) == (None, None)
    await ledger_conn.execute(
        "INSERT INTO retention_run (settings, outcome, dry_run) VALUES"
        " ('{\"arrivals_s\": 7776000, \"identity_horizon_s\": 157680000}', 'done', false),"
        " ('{\"arrivals_s\": 1, \"identity_horizon_s\": 2}', 'done', true)"
    )
    await ledger_conn.commit()
    assert await retention_state.stored_periods(ledger_conn) == (157680000.0, 7776000.0)


async def test_an_older_first_arrival_in_the_same_partition_is_found_again(ledger_conn: Conn) -> None:
    """No period partitions (every arrival in DEFAULT): the new arrival would break the partition's
    unique key; the retry reads every partition and gives the first decisions, adding nothing."""
    assert await decisions(ledger_conn, 90 * DAY) == EXPECTED
    arrivals = await count(ledger_conn, "arrival")
    await ledger_conn.execute("UPDATE arrival SET received_at = received_at - interval '100 days'")
    await ledger_conn.commit()
    assert await decisions(ledger_conn, 90 * DAY) == EXPECTED
    assert await count(ledger_conn, "arrival") == arrivals

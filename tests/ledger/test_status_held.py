"""A status record that arrives while PostgreSQL is away is held and kept once it answers again, in
order per gateway (issue 38's soak saw one dropped): the last record of a gateway that died meanwhile
would otherwise never come."""

from __future__ import annotations

import asyncio

import pgcluster
import pytest

from agent.ledger.connection import connect
from agent.ledger.status_intake import StatusStore


def rec(gateway: str, at: str, state: str = "running") -> dict[str, object]:
    return {
        "site": "plant-1",
        "gateway": gateway,
        "at": at,
        "state": state,
        "session": "2026-12-06T00:00:00.000Z",
    }


async def test_records_held_while_the_database_is_down_are_kept_in_order_when_it_is_back(
    own_cluster: pgcluster.Cluster,
) -> None:
    own = own_cluster
    store = StatusStore(own.dsn())
    await store.record(rec("gw-1", "2026-12-06T01:00:00.000Z"), "mqtt")
    await asyncio.to_thread(own.stop, "fast")
    for status in (
        rec("gw-1", "2026-12-06T01:01:00.000Z"),
        rec("gw-1", "2026-12-06T01:02:00.000Z"),
        {**rec("gw-1", "2026-12-06T00:00:00.000Z", "offline"), "reason": "Will"},  # its Will, last
        rec("gw-2", "2026-12-06T01:02:00.000Z"),
    ):
        with pytest.raises(Exception):  # noqa: B017 (PostgreSQL is stopped: any error of the driver)
            await store.record(status, "mqtt")
        store.hold(status, "mqtt")
    assert store.held == 3, "the latest two of gw-1 and the one of gw-2"
    with pytest.raises(Exception):  # noqa: B017
        await store.retry_held()
    assert store.held == 3, "nothing lost by a retry that failed"
    await asyncio.to_thread(own.start)
    assert await store.retry_held() == 3 and store.held == 0
    await store.close()
    conn = await connect(own.dsn())
    try:
        cur = await conn.execute(
            "SELECT gateway, reported_at::text, status->>'state' FROM gateway_status ORDER BY 1"
        )
        rows = await cur.fetchall()
    finally:
        await conn.close()
    assert [(g, s) for g, _, s in rows] == [("gw-1", "offline"), ("gw-2", "running")]
    assert rows[0][1].startswith("2026-12-06 01:02:00")

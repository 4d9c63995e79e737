"""The hash-partitioned layout (canonical_event, arrival and notification by `source`): the
project's identity table gives the same decisions on it, two arbiters on it make one canonical
per key, a re-run batch adds nothing, notifications are written once per (source, event, kind),
and two notifiers send each of them once."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from conftest import TEMPLATE, _new_database, reset
from test_arbitration import _identity_cases, decide
from test_notifications import two_workers_drain
from webhook import Receiver

from agent.core.intake import parse_delivery
from agent.ledger import arbiter, layout, report
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.connection import connect

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
NOW = "2026-04-22T09:00:00.000Z"


@pytest.fixture(scope="session")
def partitioned_dsn(pg_cluster: Any) -> str:
    dsn = _new_database(pg_cluster, TEMPLATE)

    async def go() -> None:
        conn = await connect(dsn)
        try:
            await layout.partition_by_source(conn, partitions=4)
        finally:
            await conn.close()

    asyncio.run(go())
    return dsn


@pytest.fixture
async def part_conn(partitioned_dsn: str) -> AsyncIterator[Conn]:
    conn = await connect(partitioned_dsn)
    try:
        await reset(conn)
        yield conn
    finally:
        await conn.close()


async def test_the_layout_is_partitioned_and_refuses_a_second_run(part_conn: Conn) -> None:
    cur = await part_conn.execute(
        "SELECT c.relname, count(i.inhrelid) FROM pg_class c JOIN pg_inherits i ON i.inhparent = c.oid"
        " WHERE c.relkind = 'p' GROUP BY c.relname ORDER BY 1"
    )
    got = dict(await cur.fetchall())
    await part_conn.rollback()
    assert got.pop("canonical_event") == 4
    # arrival and notification: a DEFAULT partition and the time partitions made ahead (now and the
    # next two months), each of those hash-partitioned by source in 4 (docs/retention.md)
    assert got.pop("arrival") == got.pop("notification") == 4
    assert len(got) == 6 and set(got.values()) == {4}, got
    with pytest.raises(psycopg.errors.RaiseException, match="partitioned already"):
        await layout.partition_by_source(part_conn)


@pytest.mark.parametrize(("lines", "expected"), _identity_cases())
async def test_identity_table_on_the_partitioned_layout(
    part_conn: Conn, lines: list[str], expected: list[str]
) -> None:
    assert await decide(part_conn, lines, True) == expected
    summary = await report.summary(part_conn)
    assert summary["arrivals"] == len(lines)
    assert summary["source_events"] == expected.count("inserted")


async def test_two_arbiters_on_the_partitioned_layout_make_one_canonical_per_key(part_conn: Conn) -> None:
    keys = 1500

    def arrivals(gateway: str, seed: int) -> list[Arrival]:
        order = list(range(keys))
        random.Random(seed).shuffle(order)
        return [
            Arrival(
                parse_delivery(
                    json.dumps({"source": f"PLC-{n % 13}/Ch{n % 5}", "transitionId": n, "bootId": "B1",
                                "payload": {"n": n}}),
                    arrival_at=NOW, receiver=gateway, line=i,
                ),
                gateway,
                "import",
            )
            for i, n in enumerate(order, 1)
        ]  # fmt: skip

    rules = [NotifyRule("trip", "http://127.0.0.1:1/n")]
    dsn = part_conn.info.dsn

    async def arbiter_run(gateway: str, seed: int) -> list[str]:
        conn = await connect(dsn)
        try:
            items = arrivals(gateway, seed)
            out: list[str] = []
            for i in range(0, keys, 100):
                out += [
                    oc.decision.value for oc in await arbiter.record(conn, items[i : i + 100], rules=rules)
                ]
            assert [oc.decision.value for oc in await arbiter.record(conn, items[:100], rules=rules)] == out[
                :100
            ]
            return out
        finally:
            await conn.close()

    a, b = await asyncio.gather(arbiter_run("gw-a", 1), arbiter_run("gw-b", 2))
    decisions = a + b
    assert decisions.count("inserted") == keys and decisions.count("duplicate") == keys
    cur = await part_conn.execute(
        "SELECT (SELECT count(*) FROM canonical_event), (SELECT count(DISTINCT (source, transition_id)) FROM"
        " canonical_event), (SELECT count(*) FROM arrival), (SELECT count(*) FROM notification),"
        " (SELECT count(*) FROM notification n JOIN canonical_event c ON c.id = n.canonical_id"
        " AND c.source = n.source)"
    )
    assert await cur.fetchone() == (keys, keys, 2 * keys, keys, keys)


async def test_two_notifiers_on_the_partitioned_layout_send_every_row_once(
    part_conn: Conn,
    receiver: Receiver,
) -> None:
    """The notifier's claim (`FOR UPDATE SKIP LOCKED`), send and mark run unchanged on the
    partitioned `notification` table: 300 rows over 13 sources, two workers, each row sent once
    with its own idempotency key, every row marked sent."""
    items = [
        Arrival(
            parse_delivery(
                json.dumps({"source": f"PLC-{n % 13}/Trip", "transitionId": n, "bootId": "B1",
                            "payload": {"n": n}}),
                arrival_at=NOW, receiver="gw", line=n,
            ),
            "gw",
            "import",
        )
        for n in range(1, 301)
    ]  # fmt: skip
    decisions = await arbiter.record(part_conn, items, rules=[NotifyRule("trip", receiver.url)])
    assert {oc.decision.value for oc in decisions} == {"inserted"}
    await two_workers_drain(part_conn.info.dsn, receiver, 300)
    cur = await part_conn.execute("SELECT state, attempts, count(*) FROM notification GROUP BY 1, 2")
    assert await cur.fetchall() == [("sent", 1, 300)]
    await part_conn.commit()

"""Migration 0005 on a ledger of version 4 with rows in it, in both layouts (plain, and partitioned
by source as the layout was at version 4): `gateway_status` keyed by (site, gateway), each old row
given the site its record names, else the site of its gateway's latest arrival whose site is known,
else '' (not known); the records themselves unchanged; the fleet reads them after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_fleet_sites import STORE_ID, T0

from agent.core.intake import parse_delivery
from agent.core.records import Entry, Transition
from agent.ledger import arbiter, cloudevents, gateway_status, migrations
from agent.ledger.arrivals import from_import
from agent.ledger.connection import connect
from agent.ledger.web import queries
from agent.sinks.encode import encode

OLD = """INSERT INTO gateway_status (gateway, agent_version, reported_at, received_at, via, status)
VALUES (%s, '0.1.0', %s, now(), 'mqtt', %s::jsonb)"""


def event(site: str, gateway: str, n: int) -> bytes:
    rec = Transition(n, "PUMP-07/Trip", f"T{n}", "B1", T0, "{}", T0)
    return encode(
        Entry(n, "transition", n, 1, rec), site=site, gateway=gateway, replayed=False, store_id=STORE_ID
    ).body


LAYOUT_V6 = Path(__file__).with_name("layout_v6.sql")  # the layout before 0007


def layout_at_version_4() -> str:
    """The partitioned layout as it was before migration 0005: 0003's (gateway, received_at) index,
    not the fleet's (no arrival_site yet), and none of 0006's."""
    lines = LAYOUT_V6.read_text(encoding="utf-8").splitlines(keepends=True)
    before = "CREATE INDEX arrival_gateway_received ON arrival (gateway, received_at);\n"
    kept = [
        before if "arrival_gateway_site_received" in line else line
        for line in lines
        if "canonical_event_no_source_ts" not in line  # 0006's
    ]
    assert kept != lines
    return "".join(kept)


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
async def test_version_4_rows_get_their_site_and_the_fleet_reads_them(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, partitioned: bool
) -> None:
    every = migrations.migrations()
    assert every[4].version == 5 and every[4].name == "fleet_by_site"
    conn = await connect(pg_dsn)
    try:
        monkeypatch.setattr(migrations, "migrations", lambda: every[:4])
        assert await migrations.migrate(conn) == [1, 2, 3, 4]
        monkeypatch.undo()
        if partitioned:
            async with conn.transaction():
                await conn.execute("SELECT set_config('ledger.partitions', '4', true)")
                await conn.execute(layout_at_version_4().encode())
        # gw-2's arrivals: one its encoder made at site area/plant-2, then an import line (no site).
        body = b"[" + event("area/plant-2", "gw-2", 1) + b"]"
        await arbiter.record(conn, cloudevents.parse_body(body, batch=True, via="mqtt", now=T0))
        line = json.dumps({"source": "PUMP-07/Trip", "transitionId": "T9", "bootId": "B1", "arrivalAt": T0})
        item = parse_delivery(line, arrival_at=T0, receiver="ledger-import:import", line=1)
        await arbiter.record(conn, [from_import(item, "gw-2")])
        records: dict[str, dict[str, Any]] = {
            "gw-1": {"site": "plant-1", "gateway": "gw-1", "at": T0, "state": "running"},
            "gw-2": {"gateway": "gw-2", "at": T0},  # a record without its site
            "gw-3": {"gateway": "gw-3", "at": T0},  # neither a site nor an arrival
        }
        for gw, rec in records.items():
            await conn.execute(OLD, (gw, T0, json.dumps(rec)))
        await conn.commit()

        monkeypatch.setattr(migrations, "migrations", lambda: every[:5])
        assert await migrations.migrate(conn) == [5]
        monkeypatch.undo()
        # retention (0006) and time partitions (0007) apply on both layouts too
        assert await migrations.migrate(conn) == [6, 7]
        await migrations.check(conn)
        cur = await conn.execute("SELECT site, gateway, status FROM gateway_status ORDER BY gateway")
        rows = await cur.fetchall()
        assert [(s, g) for s, g, _ in rows] == [("plant-1", "gw-1"), ("area/plant-2", "gw-2"), ("", "gw-3")]
        assert [st for _, _, st in rows] == list(records.values()), "the records kept as they were"
        cur = await conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY (i.indkey) WHERE i.indrelid = 'gateway_status'::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)"
        )
        assert [r[0] for r in await cur.fetchall()] == ["site", "gateway"]
        cur = await conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%arrival_site(via, kind, source)%'"
        )
        # the table's, the legacy partition's (and its 4 hash partitions'), the default partition's
        assert (await cur.fetchone() or [0])[0] == (7 if partitioned else 3), "the fleet's index"

        # The same gateway name at another site is another row; the fleet reads both kinds.
        assert await gateway_status.record(conn, {"site": "plant-9", "gateway": "gw-1", "at": T0}, "http")
        fleet = {(r["site"], r["gateway"]): r for r in await queries.fetch(conn, queries.FLEET)}
    finally:
        await conn.close()
    assert set(fleet) == {
        ("plant-1", "gw-1"),
        ("plant-9", "gw-1"),
        ("area/plant-2", "gw-2"),
        ("", "gw-2"),  # the import line's arrival: its site is not known
        ("", "gw-3"),
    }
    assert fleet["area/plant-2", "gw-2"]["last_arrival"] is not None
    assert fleet["area/plant-2", "gw-2"]["status_heard_at"] is not None
    assert fleet["", "gw-2"]["status"] is None and fleet["", "gw-3"]["last_arrival"] is None

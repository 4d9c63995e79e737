"""A ledger filled for the review page's tests: the seed's cases, imported as the CLI does, plus
what the seed lacks (a hostile payload, boots and a gap, notifications in each state, the status
of two gateways, one of them silent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[1] / "data"
SCRIPT = "<script>alert(1)</script>"

# Two gateways deliver one hostile event; a third line conflicts with it (every field a PLC sends
# may hold markup), so the page shows it in the event, the conflicts and the exports.
EXTRA = [
    {
        "source": "PUMP-09/Trip",
        "transitionId": "T1",
        "bootId": "B1",
        "sourceTimestamp": "2026-04-22T16:00:00.000Z",
        "arrivalAt": "2026-04-22T16:00:00.100Z",
        "gateway": "gw-1",
        "payload": {"state": SCRIPT, "severity": "High"},
    },
    {
        "source": "PUMP-09/Trip",
        "transitionId": "T1",
        "bootId": "B1",
        "sourceTimestamp": "2026-04-22T16:00:00.000Z",
        "arrivalAt": "2026-04-22T16:00:00.200Z",
        "gateway": "gw-2",
        "payload": {"state": SCRIPT, "severity": "High"},
    },
    {
        "source": "PUMP-09/Trip",
        "transitionId": "T1",
        "bootId": "B1",
        "sourceTimestamp": "2026-04-22T16:00:00.000Z",
        "arrivalAt": "2026-04-22T16:00:01.000Z",
        "gateway": "gw-2",
        "payload": {"state": SCRIPT, "severity": "Low"},
    },
]


async def fill(conn: Any, tmp: Path) -> None:
    from agent.ledger import arbiter, gateway_status
    from agent.ledger.arrivals import from_import
    from agent.sources.importer import read_batches

    extra = tmp / "extra.jsonl"
    extra.write_text("".join(json.dumps(x) + "\n" for x in EXTRA))
    for path in (DATA / "seed-cases.jsonl", extra):
        for batch in read_batches(path, receiver="ledger-import:import"):
            await arbiter.record(conn, [from_import(it, "import") for it in batch.items])
    await conn.execute(
        "INSERT INTO boot (device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence)"
        " VALUES ('PUMP-07', 'B90', 'B20', '2026-04-23T07:00:00Z', NULL, true, '{\"seen\": \"live\"}'),"
        " ('PUMP-07', 'B91', 'B90', '2026-04-23T08:04:00Z', NULL, true, %s)",
        (json.dumps({"note": SCRIPT}),),
    )
    await conn.execute(
        "INSERT INTO anomaly (source, ce_id, boot_id, kind, from_value, to_value, detected_at, evidence)"
        " VALUES ('PUMP-07/Trip', 'gap-1', 'B91', 'gap', '4', '9', '2026-04-22T08:06:00Z', '{\"missing\": 4}')"
    )
    await conn.execute(
        "INSERT INTO notification (canonical_id, kind, url, idempotency_key, state, attempts, max_attempts,"
        " last_error) VALUES (1, 'trip-webhook', 'http://127.0.0.1:9/notify', 'k1', 'dead', 3, 3, %s),"
        " (2, 'trip-webhook', 'http://127.0.0.1:9/notify', 'k2', 'sent', 1, 3, NULL),"
        " (3, 'trip-webhook', 'http://127.0.0.1:9/notify', 'k3', 'pending', 0, 3, NULL)",
        ("HTTP 500 from receiver: " + SCRIPT,),
    )
    await conn.commit()
    now = {
        "site": "plant-1",
        "gateway": "gw-1",
        "at": "2030-01-01T00:00:00Z",
        "agent_version": "0.1.0",
        "upstreams": {"mqtt": {"backlog": 12, "oldest_pending_age_s": 40.0}},
        "store_room_bytes": 5_000_000_000,
        "devices": {"PUMP-09": {"link": "up", "ticks_missed": 0}},
    }
    await gateway_status.record(conn, now, "mqtt")
    # gw-2's last word is old: it is the silent one (its arrivals are 2026's imports).
    await gateway_status.record(conn, {**now, "gateway": "gw-2", "at": "2026-04-22T16:00:00Z"}, "mqtt")
    await conn.execute(
        "UPDATE gateway_status SET received_at = now() - interval '1 hour' WHERE gateway = 'gw-2'"
    )
    await conn.execute("UPDATE arrival SET received_at = now() - interval '1 hour' WHERE gateway = 'gw-2'")
    await conn.execute("UPDATE gateway_status SET received_at = now() WHERE gateway = 'gw-1'")
    await conn.commit()


async def dump(conn: Any) -> str:
    """Every row of every ledger table, in a stable order (a before/after comparison)."""
    cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
    out = []
    for (name,) in await cur.fetchall():
        rows = await conn.execute(f"SELECT t::text FROM {name} t ORDER BY 1")
        out.append(f"-- {name}")
        out += [r[0] for r in await rows.fetchall()]
    await conn.rollback()
    return "\n".join(out)

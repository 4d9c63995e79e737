"""Read-side queries of the ledger. An event's counts, span and status are read from its arrivals
(the arbiter never updates a canonical row).

Read-side queries of the ledger, shaped as the contract's `report --json` (section 6) plus the
ledger's evidence (`gateway`, `via`, `received_at`, `attempt`, `replayed` on each arrival).

Rows are streamed through server-side cursors inside one read-only REPEATABLE READ transaction
(`snapshot`), so a report of a large ledger stays flat in memory and its sections agree.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, LiteralString

import psycopg

from agent.core.contract import Decision, Status
from agent.core.summary import summary_counts
from agent.core.timestamps import format_timestamp

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

_CHUNK = 1000


def ts(value: datetime | None) -> str | None:
    return None if value is None else format_timestamp(value)


@asynccontextmanager
async def snapshot(conn: Conn) -> AsyncIterator[None]:
    """One consistent read-only view for every section read inside it."""
    await conn.rollback()
    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    finally:
        await conn.rollback()


async def _rows(conn: Conn, sql: LiteralString, name: str) -> AsyncIterator[tuple[Any, ...]]:
    async with conn.cursor(name=name) as cur:
        cur.itersize = _CHUNK
        await cur.execute(sql)
        async for row in cur:
            yield row


async def summary(conn: Conn) -> dict[str, int]:
    """Counts kept apart: source events, arrivals by decision, records, notifications."""
    cur = await conn.execute(
        "SELECT decision, count(*) FROM arrival"
        " WHERE kind IS NULL OR kind = 'transition' OR decision = 'identity_incomplete' GROUP BY decision"
    )
    by_decision = {str(r[0]): int(r[1]) for r in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM canonical_event), (SELECT count(*) FROM arrival),"
        " (SELECT count(*) FROM boot), (SELECT count(*) FROM anomaly WHERE kind = 'gap'),"
        " (SELECT count(*) FROM anomaly WHERE kind <> 'gap'),"
        " (SELECT count(*) FROM conflict WHERE state = 'open')"
    )
    row = await cur.fetchone()
    assert row is not None
    events, arrivals, boots, gaps, anomalies, open_conflicts = (int(v) for v in row)
    counts = summary_counts(
        by_decision,
        events=events,
        arrivals=arrivals,
        boots=boots,
        gaps=gaps,
        anomalies=anomalies,
        delivery_attempts=0,  # the ledger sends nothing upstream; notifications are counted apart
    )
    beyond = by_decision.get(Decision.BEYOND_HORIZON.value, 0)
    return {**counts, "conflicts_open": open_conflicts, "beyond_horizon": beyond}


async def events(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    """Canonical transition events, by id."""
    sql: LiteralString = (
        "SELECT c.id, c.source, c.transition_id, c.boot_id, c.source_ts, a.k > 0, c.payload, c.payload_hash,"
        " a.n - 1, a.k, a.f, a.l, c.first_gateway, a.g"
        " FROM canonical_event c CROSS JOIN LATERAL (SELECT count(*) AS n,"
        " count(*) FILTER (WHERE decision = 'conflict') AS k, min(gateway_arrival_at) AS f,"
        " max(gateway_arrival_at) AS l, array_agg(DISTINCT gateway ORDER BY gateway) AS g"
        " FROM arrival WHERE canonical_id = c.id) a"
        " ORDER BY c.id"
    )
    async for r in _rows(conn, sql, "report_events"):
        yield {
            "canonical_id": r[0],
            "source": r[1],
            "transitionId": r[2],
            "bootId": r[3],
            "sourceTimestamp": ts(r[4]),
            "status": Status.DUPLICATE_CONFLICT.value if r[5] else Status.CANONICAL.value,
            "payload": None if r[6] is None else json.loads(r[6]),  # None: pruned (the archive has it)
            "payload_hash": r[7],
            "duplicate_count": max(r[8], 0),  # of the arrivals kept: a prune removes old ones
            "conflict_count": r[9],
            "first_arrival": ts(r[10]),
            "last_arrival": ts(r[11]),
            "first_gateway": r[12],
            "arrivals": r[8] + 1,  # kept
            "gateways": list(r[13]),
        }


_ARRIVAL_COLUMNS: LiteralString = (
    "SELECT a.id, a.source, a.transition_id, a.boot_id, a.source_ts, a.gateway_arrival_at, a.decision,"
    " a.canonical_id, a.payload_hash, a.reason, a.flags, a.gateway, a.via, a.received_at, a.attempt,"
    " a.replayed, a.line, a.kind, a.ce_id, a.raw FROM arrival a"
)


def _arrival(r: tuple[Any, ...]) -> dict[str, Any]:
    decision = r[6]
    return {
        "arrival_id": r[0],
        "source": r[1],
        "transitionId": r[2],
        "bootId": r[3],
        "sourceTimestamp": ts(r[4]),
        "arrivalAt": ts(r[5]),
        "decision": decision,
        "canonical_id": r[7],
        "duplicate_of": r[7] if decision in (Decision.DUPLICATE.value, Decision.CONFLICT.value) else None,
        "payload_hash": r[8],
        "reason": r[9],
        "flags": list(r[10]),
        "gateway": r[11],
        "via": r[12],
        "received_at": ts(r[13]),
        "attempt": r[14],
        "replayed": r[15],
        "line": r[16],
        "kind": r[17],
        "ce_id": r[18],
        "raw": bytes(r[19]).decode("utf-8", "backslashreplace"),
    }


async def arrivals(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    async for r in _rows(conn, _ARRIVAL_COLUMNS + " ORDER BY a.id", "report_arrivals"):
        yield _arrival(r)


async def pending(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    """The identity-incomplete and beyond-horizon arrivals waiting for a person."""
    sql: LiteralString = (
        _ARRIVAL_COLUMNS + " JOIN pending p ON p.arrival_id = a.id WHERE p.state = 'open'"
        " ORDER BY a.gateway_arrival_at, a.id"
    )
    async for r in _rows(conn, sql, "report_pending"):
        yield _arrival(r)


async def conflicts(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    """Open conflicts with both originals: the canonical's content and the arrival's."""
    sql: LiteralString = (
        "SELECT x.arrival_id, x.canonical_id, c.source, c.transition_id, c.boot_id, c.payload,"
        " c.payload_hash, c.source_ts, x.payload, x.payload_hash, x.source_ts, a.gateway, c.first_gateway,"
        " a.gateway_arrival_at, c.inserted_arrival_at"
        " FROM conflict x JOIN canonical_event c ON c.id = x.canonical_id"
        " JOIN arrival a ON a.id = x.arrival_id"
        " WHERE x.state = 'open' ORDER BY x.arrival_id"
    )
    async for r in _rows(conn, sql, "report_conflicts"):
        yield {
            "arrival_id": r[0],
            "canonical_id": r[1],
            "source": r[2],
            "transitionId": r[3],
            "bootId": r[4],
            "canonical": {
                "payload": None if r[5] is None else json.loads(r[5]),  # None: pruned (in the archive)
                "payload_hash": r[6],
                "sourceTimestamp": ts(r[7]),
                "gateway": r[12],
                "arrivalAt": ts(r[14]),
            },
            "conflicting": {
                "payload": json.loads(r[8]),
                "payload_hash": r[9],
                "sourceTimestamp": ts(r[10]),
                "gateway": r[11],
                "arrivalAt": ts(r[13]),
            },
            "gateway": r[11],
        }


async def boots(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    sql: LiteralString = (
        "SELECT device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence, arrival_id"
        " FROM boot ORDER BY device, id"
    )
    async for r in _rows(conn, sql, "report_boots"):
        yield {
            "device": r[0],
            "bootId": r[1],
            "previous_bootId": r[2],
            "first_arrival": ts(r[3]),
            "sourceTimestamp": ts(r[4]),
            "live": r[5],
            "evidence": json.loads(r[6]),
            "arrival_id": r[7],
        }


async def anomalies(conn: Conn, *, gaps: bool) -> AsyncGenerator[dict[str, Any]]:
    sql: LiteralString = (
        "SELECT source, boot_id, kind, from_value, to_value, detected_at, evidence FROM anomaly"
        + (" WHERE kind = 'gap'" if gaps else " WHERE kind <> 'gap'")
        + " ORDER BY id"
    )
    async for r in _rows(conn, sql, "report_gaps" if gaps else "report_anomalies"):
        yield {
            "source": r[0],
            "bootId": r[1],
            "kind": r[2],
            "from": r[3],
            "to": r[4],
            "detected_at": ts(r[5]),
            "evidence": json.loads(r[6]),
        }


async def site_tally(conn: Conn, site: str) -> dict[str, int]:
    """For one site's events: canonical events, arrivals, events with arrivals from 2+ gateways, boots."""
    cur = await conn.execute(
        "SELECT count(*), coalesce(sum(n), 0), count(*) FILTER (WHERE g >= 2) FROM (SELECT c.id,"
        " count(a.id) AS n, count(DISTINCT a.gateway) AS g FROM canonical_event c"
        " JOIN arrival a ON a.canonical_id = c.id WHERE starts_with(c.source, %s) GROUP BY c.id) x",
        (site + "/",),
    )
    row = await cur.fetchone()
    assert row is not None
    cur = await conn.execute("SELECT count(*) FROM boot WHERE starts_with(device, %s)", (site + "/",))
    boots = await cur.fetchone()
    assert boots is not None
    return {"events": int(row[0]), "arrivals": int(row[1]), "from_both": int(row[2]), "boots": int(boots[0])}

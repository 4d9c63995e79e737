"""Read-side queries of the ledger, shaped as the contract's `report --json` (section 6) plus the
ledger's evidence (`gateway`, `via`, `received_at`, `attempt`, `replayed` on each arrival). An
event's counts, span and status are read from its arrivals (the arbiter never updates a canonical
row).

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
from psycopg.rows import dict_row

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


async def _rows(conn: Conn, sql: LiteralString, name: str) -> AsyncIterator[dict[str, Any]]:
    """The rows as dicts by column name, in the select list's order (the report's keys are the
    columns' names, `AS "transitionId"` where the contract spells them so)."""
    async with conn.cursor(name=name, row_factory=dict_row) as cur:
        cur.itersize = _CHUNK
        await cur.execute(sql)
        async for row in cur:
            yield row


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _times(row: dict[str, Any], *columns: str) -> dict[str, Any]:
    """The row with these timestamp columns written as RFC 3339 text (the keys keep their order)."""
    return {**row, **{c: ts(row[c]) for c in columns}}


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
        'SELECT c.id AS canonical_id, c.source, c.transition_id AS "transitionId", c.boot_id AS "bootId",'
        ' c.source_ts AS "sourceTimestamp", a.k > 0 AS status, c.payload, c.payload_hash,'
        " greatest(a.n - 1, 0) AS duplicate_count,"  # of the arrivals kept: a prune removes old ones
        " a.k AS conflict_count, a.f AS first_arrival, a.l AS last_arrival, c.first_gateway,"
        " a.n AS arrivals, a.g AS gateways"
        " FROM canonical_event c CROSS JOIN LATERAL (SELECT count(*) AS n,"
        " count(*) FILTER (WHERE decision = 'conflict') AS k, min(gateway_arrival_at) AS f,"
        " max(gateway_arrival_at) AS l, array_agg(DISTINCT gateway ORDER BY gateway) AS g"
        " FROM arrival WHERE canonical_id = c.id) a"
        " ORDER BY c.id"
    )
    async for r in _rows(conn, sql, "report_events"):
        yield {
            **_times(r, "sourceTimestamp", "first_arrival", "last_arrival"),
            "status": Status.DUPLICATE_CONFLICT.value if r["status"] else Status.CANONICAL.value,
            "payload": _json(r["payload"]),  # None: pruned (the archive has it)
            "gateways": list(r["gateways"]),
        }


# `duplicate_of` is selected as the canonical id and kept only for a duplicate or a conflict.
_ARRIVAL_COLUMNS: LiteralString = (
    'SELECT a.id AS arrival_id, a.source, a.transition_id AS "transitionId", a.boot_id AS "bootId",'
    ' a.source_ts AS "sourceTimestamp", a.gateway_arrival_at AS "arrivalAt", a.decision,'
    " a.canonical_id, a.canonical_id AS duplicate_of, a.payload_hash, a.reason, a.flags, a.gateway,"
    " a.via, a.received_at, a.attempt, a.replayed, a.line, a.kind, a.ce_id, a.raw FROM arrival a"
)
_DUPLICATE_OF = (Decision.DUPLICATE.value, Decision.CONFLICT.value)


def _arrival(r: dict[str, Any]) -> dict[str, Any]:
    return {
        **_times(r, "sourceTimestamp", "arrivalAt", "received_at"),
        "duplicate_of": r["canonical_id"] if r["decision"] in _DUPLICATE_OF else None,
        "flags": list(r["flags"]),
        "raw": bytes(r["raw"]).decode("utf-8", "backslashreplace"),
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
        'SELECT x.arrival_id, x.canonical_id, c.source, c.transition_id AS "transitionId",'
        ' c.boot_id AS "bootId", c.payload AS c_payload, c.payload_hash AS c_hash, c.source_ts AS c_ts,'
        " c.first_gateway AS c_gateway, c.inserted_arrival_at AS c_at, x.payload, x.payload_hash,"
        " x.source_ts, a.gateway, a.gateway_arrival_at"
        " FROM conflict x JOIN canonical_event c ON c.id = x.canonical_id"
        " JOIN arrival a ON a.id = x.arrival_id"
        " WHERE x.state = 'open' ORDER BY x.arrival_id"
    )
    async for r in _rows(conn, sql, "report_conflicts"):
        yield {
            "arrival_id": r["arrival_id"],
            "canonical_id": r["canonical_id"],
            "source": r["source"],
            "transitionId": r["transitionId"],
            "bootId": r["bootId"],
            "canonical": {
                "payload": _json(r["c_payload"]),  # None: pruned (in the archive)
                "payload_hash": r["c_hash"],
                "sourceTimestamp": ts(r["c_ts"]),
                "gateway": r["c_gateway"],
                "arrivalAt": ts(r["c_at"]),
            },
            "conflicting": {
                "payload": json.loads(r["payload"]),
                "payload_hash": r["payload_hash"],
                "sourceTimestamp": ts(r["source_ts"]),
                "gateway": r["gateway"],
                "arrivalAt": ts(r["gateway_arrival_at"]),
            },
            "gateway": r["gateway"],
        }


async def boots(conn: Conn) -> AsyncGenerator[dict[str, Any]]:
    sql: LiteralString = (
        'SELECT device, boot_id AS "bootId", previous_boot_id AS "previous_bootId", first_arrival,'
        ' source_ts AS "sourceTimestamp", live, evidence, arrival_id FROM boot ORDER BY device, id'
    )
    async for r in _rows(conn, sql, "report_boots"):
        yield {**_times(r, "first_arrival", "sourceTimestamp"), "evidence": json.loads(r["evidence"])}


async def anomalies(conn: Conn, *, gaps: bool) -> AsyncGenerator[dict[str, Any]]:
    sql: LiteralString = (
        'SELECT source, boot_id AS "bootId", kind, from_value AS "from", to_value AS "to", detected_at,'
        " evidence FROM anomaly"
        + (" WHERE kind = 'gap'" if gaps else " WHERE kind <> 'gap'")
        + " ORDER BY id"
    )
    async for r in _rows(conn, sql, "report_gaps" if gaps else "report_anomalies"):
        yield {**_times(r, "detected_at"), "evidence": json.loads(r["evidence"])}


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

"""Read-side queries of the store, shaped as the contract's `report --json` fields.

Rows are streamed from SQLite in chunks (async generators), so a report of a
large store does not hold it all in memory.
Every event and arrival shows its `identity_basis` (`counter`, `event_id`, `window`), and an
event keyed by a window key the flag `window_key`. Each generator closes the one it reads from when it is
closed itself, so a reader that stops early leaves no cursor behind the connection's close.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import aiosqlite

from agent.core.basis import basis_flags
from agent.core.contract import Decision
from agent.core.summary import summary_counts
from agent.store.tally import LAST_ARRIVAL, REPEATS, TALLY_BY_EVENT

_CHUNK = 1000

SORTS = {
    "arrival": "first_arrival, canonical_id",
    "state": "status DESC, source, boot_id, first_arrival",
    "generation": "device, boot_id, source, first_arrival",
    "source": "source, boot_id, transition_id",
    "id": "canonical_id",
}


async def _stream(
    db: aiosqlite.Connection, sql: str, params: tuple[Any, ...] = ()
) -> AsyncGenerator[Any, None]:
    async with db.execute(sql, params) as cur:
        while rows := await cur.fetchmany(_CHUNK):
            for row in rows:
                yield row


async def summary(db: aiosqlite.Connection) -> dict[str, int]:
    """Counts kept apart: source events, arrivals (by decision), records, delivery attempts."""
    by_decision: dict[str, int] = {
        r[0]: r[1]
        for r in await db.execute_fetchall("SELECT decision, count(*) FROM arrivals GROUP BY decision")
    }
    one = await db.execute_fetchall(
        "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM arrivals), (SELECT count(*) FROM boots),"
        " (SELECT count(*) FROM anomalies WHERE kind = 'gap'),"
        " (SELECT count(*) FROM anomalies WHERE kind <> 'gap'),"
        " (SELECT coalesce(sum(attempts), 0) FROM outbox)"
    )
    events, arrivals, boots, gaps, anomalies, attempts = next(iter(one))
    return summary_counts(
        by_decision,
        events=events,
        arrivals=arrivals,
        boots=boots,
        gaps=gaps,
        anomalies=anomalies,
        delivery_attempts=attempts,
    )


async def events(db: aiosqlite.Connection, sort: str = "id") -> AsyncGenerator[dict[str, Any], None]:
    order = SORTS[sort]
    async with aclosing(
        _stream(
            db,
            "SELECT canonical_id, source, transition_id, boot_id, source_ts, status, payload, payload_hash,"
            f" {REPEATS}, conflict_count, first_arrival, {LAST_ARRIVAL}, identity_basis"
            f" FROM events e LEFT JOIN ({TALLY_BY_EVENT}) t ON t.tally_id = e.canonical_id ORDER BY {order}",
        )
    ) as rows:
        async for r in rows:
            yield {
                "canonical_id": r[0],
                "source": r[1],
                "transitionId": r[2],
                "bootId": r[3],
                "sourceTimestamp": r[4],
                "status": r[5],
                "payload": json.loads(r[6]),
                "payload_hash": r[7],
                "duplicate_count": r[8],
                "conflict_count": r[9],
                "first_arrival": r[10],
                "last_arrival": r[11],
                "identity_basis": r[12],
                "flags": list(basis_flags(r[12])),
            }


def _raw_text(raw: str | bytes) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8", "backslashreplace")


async def arrivals(
    db: aiosqlite.Connection, *, where: str = "", sort: str = "arrival_id"
) -> AsyncGenerator[dict[str, Any], None]:
    async with aclosing(
        _stream(
            db,
            "SELECT arrival_id, source, transition_id, boot_id, source_ts, arrival_at, decision,"
            " canonical_id, payload_hash, reason, flags, receiver, line, live, raw, identity_basis, via"
            f" FROM arrivals {where} ORDER BY {sort}",
        )
    ) as rows:
        async for r in rows:
            decision = r[6]
            row = {
                "arrival_id": r[0],
                "source": r[1],
                "transitionId": r[2],
                "bootId": r[3],
                "sourceTimestamp": r[4],
                "arrivalAt": r[5],
                "decision": decision,
                "canonical_id": r[7],
                "duplicate_of": r[7]
                if decision in (Decision.DUPLICATE.value, Decision.CONFLICT.value)
                else None,
                "payload_hash": r[8],
                "reason": r[9],
                "flags": r[10].split() if r[10] else [],
                "receiver": r[11],
                "line": r[12],
                "live": bool(r[13]),
                "raw": _raw_text(r[14]),
                "identity_basis": r[15],
            }
            if r[16] is not None:  # OPC UA alarm arrivals: live or refresh (contract 7)
                row["via"] = r[16]
            yield row


async def pending(db: aiosqlite.Connection) -> AsyncGenerator[dict[str, Any], None]:
    """The identity-incomplete arrivals waiting for a person."""
    where = "WHERE arrival_id IN (SELECT arrival_id FROM pending WHERE state = 'open')"
    async with aclosing(arrivals(db, where=where, sort="arrival_at, arrival_id")) as rows:
        async for a in rows:
            yield a


async def boots(db: aiosqlite.Connection) -> AsyncGenerator[dict[str, Any], None]:
    async with aclosing(
        _stream(
            db,
            "SELECT device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence, arrival_id"
            " FROM boots ORDER BY device, boot_row",
        )
    ) as rows:
        async for r in rows:
            yield {
                "device": r[0],
                "bootId": r[1],
                "previous_bootId": r[2],
                "first_arrival": r[3],
                "sourceTimestamp": r[4],
                "live": bool(r[5]),
                "evidence": json.loads(r[6]),
                "arrival_id": r[7],
            }


async def anomalies(db: aiosqlite.Connection, *, gaps: bool) -> AsyncGenerator[dict[str, Any], None]:
    cond = "kind = 'gap'" if gaps else "kind <> 'gap'"
    async with aclosing(
        _stream(
            db,
            "SELECT source, boot_id, kind, from_value, to_value, detected_at, evidence FROM anomalies"
            f" WHERE {cond} ORDER BY anomaly_id",
        )
    ) as rows:
        async for r in rows:
            yield {
                "source": r[0],
                "bootId": r[1],
                "kind": r[2],
                "from": r[3],
                "to": r[4],
                "detected_at": r[5],
                "evidence": json.loads(r[6]),
            }

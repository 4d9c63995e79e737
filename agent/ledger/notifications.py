"""The notification outbox's rows: written with the canonical they are about, listed, retried.

A row per matching rule is written in the same transaction as an `inserted` canonical
transition, unique on (canonical_id, kind), so a duplicate or a conflict never makes one (they
insert no canonical) and two arbiters can never make two. Its `idempotency_key` is the
lowercase hex SHA-256 of `source` + newline + `id` + newline + `kind`, where `id` is the
CloudEvents id of the event (contract section 4): stable across ledger instances, restores and
replays. Sending is `agent.ledger.notifier`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import psycopg

from agent.core import cloudevent_ids, timestamps
from agent.core.contract import Decision, Delivery, Key
from agent.core.decide import Outcome
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

CHANNEL = "edge_ledger_notifications"

INSERT = """
INSERT INTO notification (canonical_id, kind, url, idempotency_key, max_attempts, lease_s, source)
SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::int[], %b::int[], %b::text[])
ORDER BY 7, 1, 2
ON CONFLICT ON CONSTRAINT notification_key DO NOTHING
"""


def ce_id(key: Key) -> str:
    """The CloudEvents id of a transition: pct(bootId):pct(transitionId)."""
    return cloudevent_ids.ce_transition_id(key)


def idempotency_key(source: str, event_id: str, kind: str) -> str:
    return hashlib.sha256(f"{source}\n{event_id}\n{kind}".encode()).hexdigest()


async def queue(
    conn: Conn, batch: Sequence[Arrival], outcomes: Sequence[Outcome], rules: Sequence[NotifyRule]
) -> int:
    """Rows for the inserted canonicals of a batch that match a rule; returns how many were new."""
    rows: list[tuple[int, str, str, str, int, int, str]] = []
    for arr, oc in zip(batch, outcomes, strict=True):
        d = arr.item
        if oc.decision is not Decision.INSERTED or not isinstance(d, Delivery) or d.key is None:
            continue
        assert oc.canonical_id is not None
        for rule in rules:
            if rule.matches(cloudevent_ids.TRANSITION_TYPE, d.key.source, d.payload):
                key = idempotency_key(d.key.source, ce_id(d.key), rule.kind)
                rows.append(
                    (oc.canonical_id, rule.kind, rule.url, key, rule.max_attempts, rule.lease_s, d.key.source)
                )
    if not rows:
        return 0
    cols = [list(c) for c in zip(*rows, strict=True)]
    cur = await conn.execute(INSERT, cols)
    if cur.rowcount:
        # One payload-free NOTIFY per batch, delivered at COMMIT: wakes the notifiers now
        # instead of at their next poll.
        await conn.execute(f"NOTIFY {CHANNEL}")
    return cur.rowcount


async def listing(conn: Conn) -> list[dict[str, Any]]:
    """Every row, as `report --json` and `notifications --json` show it."""
    cur = await conn.execute(
        "SELECT id, canonical_id, kind, idempotency_key, state, attempts, max_attempts, last_error, sent_at,"
        " url, visible_at FROM notification ORDER BY id"
    )
    out = []
    for r in await cur.fetchall():
        out.append(
            {
                "notification_id": r[0],
                "canonical_id": r[1],
                "kind": r[2],
                "idempotency_key": r[3],
                "state": r[4],
                "attempts": r[5],
                "max_attempts": r[6],
                "last_error": r[7],
                "sent_at": None if r[8] is None else timestamps.format_timestamp(r[8]),
                "url": r[9],
                "due_at": timestamps.format_timestamp(r[10]),
            }
        )
    return out


async def retry_dead(conn: Conn, *, ids: Sequence[int] = (), more_attempts: int = 5) -> int:
    """An operator's retry: dead rows (all, or those named) pending again with `more_attempts`."""
    sql = (
        "UPDATE notification SET state = 'pending', visible_at = now(), max_attempts = attempts + %s"
        " WHERE state = 'dead'" + (" AND id = ANY(%s)" if ids else "")
    )
    params: tuple[Any, ...] = (more_attempts, list(ids)) if ids else (more_attempts,)
    cur = await conn.execute(sql, params)
    await conn.commit()
    return cur.rowcount

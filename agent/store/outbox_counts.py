"""The outbox's counts per upstream (pending, sent awaiting a receipt, delivered, rejected, attempts,
head, oldest receipt awaited and last error):
what `status`, `outbox` and the metrics show. Read on the writer's connection (inside its lock) or
on a reader's own."""

from __future__ import annotations

from dataclasses import dataclass

import aiosqlite


@dataclass(frozen=True, slots=True)
class UpstreamCounts:
    """Delivery state of one upstream. `attempts` counts delivery attempts, not events."""

    upstream: str
    pending: int
    delivered: int
    rejected: int
    attempts: int
    oldest_pending_at: str | None
    head_error: str | None
    last_rejection: str | None
    awaiting_receipt: int = 0  # `sent`: acknowledged by the broker, no receipt from the ledger yet
    oldest_awaiting_at: str | None = None  # when the oldest of them was acknowledged by the broker


async def upstream_counts(db: aiosqlite.Connection) -> list[UpstreamCounts]:
    """Counts of every registered upstream and any upstream that still has rows, by name."""
    names = [
        r[0]
        for r in await db.execute_fetchall(
            "SELECT name FROM upstreams UNION SELECT DISTINCT upstream FROM outbox ORDER BY 1"
        )
    ]
    return [await _counts_of(db, name) for name in names]


async def _counts_of(db: aiosqlite.Connection, name: str) -> UpstreamCounts:
    by_state: dict[str, int] = {}
    attempts = 0
    for state, n, a in await db.execute_fetchall(
        "SELECT state, count(*), coalesce(sum(attempts), 0) FROM outbox WHERE upstream = ? GROUP BY state",
        (name,),
    ):
        by_state[state] = int(n)
        attempts += int(a)
    head = await db.execute_fetchall(
        "SELECT created_at, last_error FROM outbox WHERE upstream = ? AND state = 'pending'"
        " ORDER BY outbox_id LIMIT 1",
        (name,),
    )
    last_rej = await db.execute_fetchall(
        "SELECT last_error FROM outbox WHERE upstream = ? AND state = 'rejected'"
        " ORDER BY outbox_id DESC LIMIT 1",
        (name,),
    )
    h = next(iter(head), None)
    lr = next(iter(last_rej), None)
    oldest_sent = None
    if by_state.get("sent"):
        sent = await db.execute_fetchall(
            "SELECT min(sent_at) FROM outbox WHERE upstream = ? AND state = 'sent'", (name,)
        )
        oldest_sent = next(iter(sent))[0]
    return UpstreamCounts(
        upstream=name,
        pending=by_state.get("pending", 0),
        delivered=by_state.get("delivered", 0),
        rejected=by_state.get("rejected", 0),
        attempts=attempts,
        oldest_pending_at=h[0] if h else None,
        head_error=h[1] if h else None,
        last_rejection=lr[0] if lr else None,
        awaiting_receipt=by_state.get("sent", 0),
        oldest_awaiting_at=oldest_sent,
    )

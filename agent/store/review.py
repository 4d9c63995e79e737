"""What a person reviews: conflicts (both originals side by side) and identity-incomplete arrivals
(with their raw evidence), each with the review marks an operator left on it.

Reads run on any connection (the reader's); `mark` runs inside the writer's transaction. A mark is
a new row of `review_marks`: nothing is updated or deleted, the arrival, its canonical event and the
pending list stay as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import aiosqlite

from agent.core.contract import Decision
from agent.core.review_mark import Mark, NotReviewable
from agent.store.report import _raw_text, _stream

REVIEWABLE = (Decision.CONFLICT.value, Decision.IDENTITY_INCOMPLETE.value)


async def _has_marks_table(db: aiosqlite.Connection) -> bool:
    found = await db.execute_fetchall(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'review_marks'"
    )
    return bool(list(found))


async def marks(db: aiosqlite.Connection) -> dict[int, list[dict[str, Any]]]:
    """Every review mark, per arrival id, oldest first (the table is small: one row per note)."""
    out: dict[int, list[dict[str, Any]]] = {}
    rows = await db.execute_fetchall(
        "SELECT arrival_id, note, marked_at, marked_by FROM review_marks ORDER BY mark_id"
    )
    for r in rows:
        out.setdefault(int(r[0]), []).append({"note": r[1], "marked_at": r[2], "marked_by": r[3]})
    return out


def _payload_of(raw: str) -> Any:
    """The delivery's payload as it arrived, when its raw text is a JSON delivery; else None."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get("payload") if isinstance(doc, dict) else None


def _hash_text(value: str | bytes | None) -> str | None:
    return value.hex() if isinstance(value, bytes) else value


_CONFLICTS = (
    "SELECT a.arrival_id, a.canonical_id, a.source, a.transition_id, a.boot_id,"
    " a.arrival_at, a.receiver, a.source_ts, a.payload_hash, a.raw,"
    " e.payload, coalesce(e.payload_hash, k.payload_hash), e.first_arrival_id, e.status,"
    " f.arrival_at, f.receiver, f.source_ts, coalesce(e.identity_basis, a.identity_basis)"
    " FROM arrivals a"
    " LEFT JOIN events e ON e.canonical_id = a.canonical_id"
    " LEFT JOIN event_keys k ON k.canonical_id = a.canonical_id"
    " LEFT JOIN arrivals f ON f.arrival_id = e.first_arrival_id"
    " WHERE a.decision = 'conflict' ORDER BY a.arrival_id"
)


async def _with_marks(
    db: aiosqlite.Connection, sql: str, open_only: bool, item: Callable[[Any], dict[str, Any]]
) -> AsyncGenerator[dict[str, Any], None]:
    """Each row of `sql` (the arrival id first) as `item` writes it, with its review marks; only
    the rows with no mark when `open_only`."""
    noted = await marks(db)
    async with aclosing(_stream(db, sql)) as rows:
        async for r in rows:
            arrival_id = int(r[0])
            if open_only and arrival_id in noted:
                continue
            yield {**item(r), "reviewed": arrival_id in noted, "marks": noted.get(arrival_id, [])}


def _conflict(r: Any) -> dict[str, Any]:
    raw = _raw_text(r[9])
    return {
        "arrival_id": int(r[0]),
        "canonical_id": r[1],
        "source": r[2],
        "transitionId": r[3],
        "bootId": r[4],
        "identity_basis": r[17],
        "canonical": {
            "arrival_id": r[12],
            "arrivalAt": r[14],
            "receiver": r[15],
            "sourceTimestamp": r[16],
            "payload_hash": _hash_text(r[11]),
            "payload": json.loads(r[10]) if r[10] is not None else None,
            "status": r[13],
        },
        "conflicting": {
            "arrival_id": int(r[0]),
            "arrivalAt": r[5],
            "receiver": r[6],
            "sourceTimestamp": r[7],
            "payload_hash": r[8],
            "payload": _payload_of(raw),
            "raw": raw,
        },
    }


def conflicts(db: aiosqlite.Connection, *, open_only: bool = False) -> AsyncGenerator[dict[str, Any], None]:
    """Each conflict arrival beside the canonical it did not overwrite: arrival, receiver, source
    time, hash and payload of both, and the review marks. A pruned canonical payload is null."""
    return _with_marks(db, _CONFLICTS, open_only, _conflict)


_PENDING = (
    "SELECT arrival_id, source, transition_id, boot_id, source_ts, arrival_at, receiver, reason, line, raw,"
    " identity_basis"
    " FROM arrivals WHERE decision = 'identity_incomplete' ORDER BY arrival_at, arrival_id"
)


def _pending(r: Any) -> dict[str, Any]:
    return {
        "arrival_id": int(r[0]),
        "source": r[1],
        "transitionId": r[2],
        "bootId": r[3],
        "sourceTimestamp": r[4],
        "arrivalAt": r[5],
        "receiver": r[6],
        "reason": r[7],
        "line": r[8],
        "raw": _raw_text(r[9]),
        "identity_basis": r[10],
    }


def pending(db: aiosqlite.Connection, *, open_only: bool = False) -> AsyncGenerator[dict[str, Any], None]:
    """Each identity-incomplete arrival with what it carried (its raw text, as it arrived), why
    its identity is incomplete, and the review marks."""
    return _with_marks(db, _PENDING, open_only, _pending)


async def mark(db: aiosqlite.Connection, arrival_id: int, note: str, at: str, by: str | None) -> Mark:
    """Add a review mark to a conflict or identity-incomplete arrival (inside the caller's
    write transaction). NotReviewable for any other arrival id."""
    found = list(
        await db.execute_fetchall("SELECT decision FROM arrivals WHERE arrival_id = ?", (arrival_id,))
    )
    if not found:
        raise NotReviewable(f"no arrival {arrival_id} in this store")
    kind = str(found[0][0])
    if kind not in REVIEWABLE:
        raise NotReviewable(
            f"arrival {arrival_id} is {kind}: only conflict and identity_incomplete arrivals are reviewed"
        )
    cur = await db.execute(
        "INSERT INTO review_marks(arrival_id, kind, note, marked_at, marked_by) VALUES (?,?,?,?,?)",
        (arrival_id, kind, note, at, by),
    )
    return Mark(int(cur.lastrowid or 0), arrival_id, kind, note, at, by)

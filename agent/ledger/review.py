"""A person's review marks on the ledger's conflicts and pending arrivals.

A mark is a new row of `review_mark` (who, when, a note that may not be empty): nothing is
updated or deleted; the arrival, its canonical event and the pending list stay as they are.
`edge-agent ledger review mark` and the review page's form both call `mark` (one writer).
"""

from __future__ import annotations

from typing import Any

import psycopg

from agent.core.review_mark import Mark, NotReviewable
from agent.core.timestamps import format_timestamp

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

REVIEWABLE = ("conflict", "identity_incomplete", "beyond_horizon")


class EmptyNote(ValueError):
    """A mark needs a note saying what was found or decided."""


async def mark(conn: Conn, arrival_id: int, note: str, by: str | None) -> Mark:
    """Append a mark on the conflict or identity-incomplete arrival `arrival_id`; committed."""
    if not note.strip():
        raise EmptyNote("the note is empty: say what was found or decided")
    await conn.rollback()
    try:
        cur = await conn.execute("SELECT decision FROM arrival WHERE id = %s", (arrival_id,))
        row = await cur.fetchone()
        if row is None:
            raise NotReviewable(f"no arrival {arrival_id}")
        if row[0] not in REVIEWABLE:
            raise NotReviewable(
                f"arrival {arrival_id} is {row[0]}:"
                " only conflicts and identity-incomplete (or beyond-horizon) arrivals are reviewed"
            )
        cur = await conn.execute(
            "INSERT INTO review_mark (arrival_id, kind, note, marked_by) VALUES (%s, %s, %s, %s)"
            " RETURNING id, marked_at",
            (arrival_id, row[0], note, by),
        )
        got = await cur.fetchone()
        assert got is not None
        await conn.commit()
    except BaseException:
        await conn.rollback()
        raise
    return Mark(int(got[0]), arrival_id, str(row[0]), note, format_timestamp(got[1]), by)


async def marks_of(conn: Conn, arrival_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The marks of these arrivals, per arrival id, oldest first."""
    if not arrival_ids:
        return {}
    cur = await conn.execute(
        "SELECT arrival_id, note, marked_at, marked_by FROM review_mark WHERE arrival_id = ANY(%s)"
        " ORDER BY arrival_id, id",
        (arrival_ids,),
    )
    out: dict[int, list[dict[str, Any]]] = {}
    for r in await cur.fetchall():
        out.setdefault(int(r[0]), []).append(
            {"note": r[1], "marked_at": format_timestamp(r[2]), "marked_by": r[3]}
        )
    return out

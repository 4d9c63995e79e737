"""The event tally: re-deliveries' counts appended, folded into `events` in bulk.

A re-delivery of an event stored in an earlier batch adds one to its `duplicate_count` and may
move its `last_arrival`. Written as an `UPDATE` of the event's row in every batch, a file whose
re-deliveries reach anywhere into the history dirtied a page of `events` per re-delivery, and each
was written to the WAL at every COMMIT and again at the checkpoint (docs/performance.md). Those two
changes are appended to `event_tally` instead (a narrow table without an index: the rows of a batch
fill a page or two at its end) and folded into `events` once the tally holds `FOLD_ROWS` rows,
before every batch of pruning and when the writer closes: a page of `events` is then written once
per fold rather than once per batch.

Every other change of a stored event is written to its row in the batch as before: a conflict
(`conflict_count`, `status`) and an arrival earlier than its `first_arrival` (both rare), so those
columns are always exact in `events`. The two tallied ones are exact only with the tally added:
every reader of them (the report, the prune plan) reads `events` joined with `TALLY_BY_EVENT`;
pruning folds first. Pure SQL text and the fold itself; the write path is `agent.store.batch`.
"""

from __future__ import annotations

import sqlite3

import aiosqlite

FOLD_ROWS = 20_000  # tally rows that make the batch fold them (a few fold per 100,000 lines)

INSERT_TALLY_HEAD = "INSERT INTO event_tally(canonical_id, later, last_arrival)"
TALLY_WIDTH = 3

# Per canonical id: the later arrivals and the latest arrival still in the tally. Joined as
# `LEFT JOIN (TALLY_BY_EVENT) t ON t.tally_id = e.canonical_id`; then `REPEATS` and `LAST_ARRIVAL`
# are the event's columns with the tally counted in.
TALLY_BY_EVENT = (
    "SELECT canonical_id AS tally_id, sum(later) AS tally_later, max(last_arrival) AS tally_last"
    " FROM event_tally GROUP BY canonical_id"
)
REPEATS = "e.duplicate_count + coalesce(t.tally_later, 0)"
LAST_ARRIVAL = "max(e.last_arrival, coalesce(t.tally_last, e.last_arrival))"

_FOLD = (
    f"WITH t AS ({TALLY_BY_EVENT}) UPDATE events SET duplicate_count = duplicate_count + t.tally_later,"
    " last_arrival = max(last_arrival, t.tally_last) FROM t WHERE events.canonical_id = t.tally_id"
)
_CLEAR = "DELETE FROM event_tally"
_ANY = "SELECT EXISTS(SELECT 1 FROM event_tally)"
_ROWS = "SELECT coalesce(max(rowid), 0) FROM event_tally"  # the row count: it is only ever emptied whole


def tally_rows(db: sqlite3.Connection) -> int:
    """How many rows the tally holds (its highest rowid: rows are appended, and removed all at once)."""
    return int(next(iter(db.execute(_ROWS).fetchall()))[0])


def fold(db: sqlite3.Connection) -> None:
    """Add the tally to `events` and empty it; inside the caller's write transaction."""
    db.execute(_FOLD)
    db.execute(_CLEAR)


async def tally_waiting(db: aiosqlite.Connection) -> bool:
    """Whether the tally holds anything to fold."""
    rows = list(await db.execute_fetchall(_ANY))
    return bool(rows[0][0])


async def fold_async(db: aiosqlite.Connection) -> None:
    """`fold` on the writer's aiosqlite connection, inside its write transaction; nothing when empty."""
    if await tally_waiting(db):
        await db.execute(_FOLD)
        await db.execute(_CLEAR)

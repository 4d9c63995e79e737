"""Arrival keys: a batch run again after its COMMIT went unanswered adds no second arrival.

A connection lost during COMMIT leaves the outcome unknown (ledger.md section 7): the batch runs
again, and every row it writes must be idempotent under that re-run. Canonicals and records are
(their unique keys); an arrival gets a key of its own, unique on (`source`, `arrival_key`):

| arrival | key: SHA-256 over |
|---|---|
| a gateway's delivery (MQTT, HTTP) | `via`, the `gateway` extension, the event's exact text |
| an import line | the file's SHA-256 and the line number (`from_import` with the digest) |
| an import line without a file digest | `via`, gateway, line number, the line's text |

Before deciding, the arbiter reads the arrivals the batch's keys already have and returns their
stored decisions: a re-run gives the decisions of the run that committed and writes nothing
again. Since migration 0007 the unique index is on each time partition of `arrival`; the read
spans the partitions received within the arrivals' retention period (all without one). What
counts as the same delivery, the race of two instances and its limit at a period boundary, the
window: docs/architecture.md, "Arrival keys".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from agent.core.contract import Decision
from agent.core.decide import Outcome
from agent.ledger.arrivals import Arrival

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

CONSTRAINT = "arrival_key"


def is_key_violation(name: str | None) -> bool:
    """A unique violation of an arrival key: the constraint of a plain table, or the unique index
    on (source, arrival_key) of a partition (`<partition>_arrival_key`, or PostgreSQL's own name
    of a hash partition's `<partition>_source_arrival_key_key`: the column's name is in every one)."""
    return name is not None and CONSTRAINT in name


# The batch's keys are sent once (they were sent twice, one copy for each branch). Each key is
# looked up on its own (LATERAL ... LIMIT 1: index probes, never a hash of whole partitions), and
# only in the partitions received since the fourth parameter (`-infinity`: all of them).
READ_KNOWN = """
WITH k AS MATERIALIZED (SELECT * FROM unnest(%b::int[], %b::text[], %b::bytea[]) AS k(i, s, key))
SELECT k.i, a.decision, a.canonical_id, a.reason, a.flags
FROM k CROSS JOIN LATERAL (SELECT decision, canonical_id, reason, flags FROM arrival a
  WHERE a.source = k.s AND a.arrival_key = k.key AND a.received_at >= %b::timestamptz LIMIT 1) a
WHERE k.s IS NOT NULL
UNION ALL
SELECT k.i, a.decision, a.canonical_id, a.reason, a.flags
FROM k CROSS JOIN LATERAL (SELECT decision, canonical_id, reason, flags FROM arrival a
  WHERE a.source IS NULL AND a.arrival_key = k.key AND a.received_at >= %b::timestamptz LIMIT 1) a
WHERE k.s IS NULL
"""


def _digest(*parts: str | bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else p.encode("utf-8", "surrogateescape")
        h.update(b"%d:" % len(b))
        h.update(b)
    return h.digest()


def _raw(raw: str | bytes) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")


def key_of(arr: Arrival) -> bytes:
    """The arrival's key (its own when the intake gave one)."""
    if arr.key is not None:
        return arr.key
    it = arr.item
    if arr.via == "import":
        return _digest(arr.via, arr.gateway, str(it.line if it.line is not None else ""), _raw(it.raw))
    return _digest(arr.via, arr.gateway, _raw(it.raw))


def source_of(arr: Arrival) -> str | None:
    """The `source` column the arrival row will have (the key's leading column)."""
    it = arr.item
    return getattr(it, "source", None)


def split(keys: Sequence[tuple[str | None, bytes]]) -> tuple[list[int], dict[int, int]]:
    """Positions of the first arrival of every key, and each later repeat -> its first's position."""
    first: dict[tuple[str | None, bytes], int] = {}
    repeats: dict[int, int] = {}
    for i, k in enumerate(keys):
        if k in first:
            repeats[i] = first[k]
        else:
            first[k] = i
    return list(first.values()), repeats


async def recorded(
    conn: Conn,
    keys: Sequence[tuple[str | None, bytes]],
    where: Sequence[int],
    since: datetime | None = None,
) -> dict[int, Outcome]:
    """The stored outcome of every position in `where` whose key has an arrival already, received
    at or after `since` (None: ever). `since` is the arrivals' retention cutoff: an arrival older
    than it is pruned anyway, and a re-run after an unknown COMMIT comes within seconds."""
    if not where:
        return {}
    cols: tuple[list[int], list[str | None], list[bytes]] = ([], [], [])
    for i in where:
        cols[0].append(i)
        cols[1].append(keys[i][0])
        cols[2].append(keys[i][1])
    bound = since if since is not None else "-infinity"
    cur = await conn.execute(READ_KNOWN, (*cols, bound, bound))
    out: dict[int, Outcome] = {}
    for i, decision, cid, reason, flags in await cur.fetchall():
        d = Decision(decision)
        dup_of = cid if d in (Decision.DUPLICATE, Decision.CONFLICT) else None
        out[int(i)] = Outcome(d, cid, dup_of, reason, tuple(flags or ()))
    return out

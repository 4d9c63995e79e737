"""The arrival rows of a batch, written in one COPY (text format, formatted here).

Every delivery is an arrival with its own id, its evidence and its arrival key
(`agent.ledger.arrival_keys`); the arbiter decides, this writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from agent.core import decide
from agent.core.contract import Delivery
from agent.ledger.arrivals import Arrival, Received

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

COPY_ARRIVALS = (
    "COPY arrival (id, kind, decision, canonical_id, source, transition_id, boot_id, source_ts,"
    " payload_hash, reason, flags, gateway, gateway_arrival_at, attempt, replayed, received_at, via,"
    " line, ce_id, raw, arrival_key) FROM STDIN"
)


def _flags(flags: tuple[str, ...]) -> str:
    """A text[] literal of flag words (lowercase words: nothing to quote)."""
    return "{" + ",".join(flags) + "}"


def _raw_bytes(raw: str | bytes) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")


def _arrival_row(arr: Arrival) -> tuple[str | None, ...]:
    """(kind, source, transitionId, bootId, sourceTimestamp, payload_hash) of an arrival."""
    it = arr.item
    if isinstance(it, Delivery):
        return ("transition", it.source, it.transition_id, it.boot_id, it.source_timestamp, it.payload_hash)
    if isinstance(it, Received):
        return (it.kind, it.source, None, it.boot_id, it.source_ts, None)
    return (None, None, None, None, None, None)


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _cell(value: object) -> str:
    """One value in COPY's text format (NULL is \\N; bytea as escaped hex)."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, bytes):
        return "\\\\x" + value.hex()
    return str(value)


async def copy(
    conn: Conn,
    batch: Sequence[Arrival],
    outcomes: list[decide.Outcome],
    ids: list[int],
    keys: list[bytes],
    now: datetime,
) -> None:
    """Every arrival in one COPY. The rows are formatted here in COPY's text format and sent as
    one buffer: per-row adaptation was the largest client cost of a batch (PostgreSQL parses the
    timestamps, which are already normalised text)."""
    received = now.isoformat()
    lines = []
    for aid, arr, oc, key in zip(ids, batch, outcomes, keys, strict=True):
        it = arr.item
        kind, source, tid, bid, sts, phash = _arrival_row(arr)
        row = (
            aid,
            kind,
            oc.decision.value,
            oc.canonical_id,
            source,
            tid,
            bid,
            sts,
            phash,
            oc.reason,
            _flags(oc.flags),
            arr.gateway,
            it.arrival_at,
            arr.attempt,
            arr.replayed,
            received,
            arr.via,
            it.line,
            arr.ce_id,
            _raw_bytes(it.raw),
            key,
        )
        lines.append("\t".join(map(_cell, row)))
    async with conn.cursor() as cur, cur.copy(COPY_ARRIVALS) as cp:
        await cp.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))

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
    async with conn.cursor() as cur, cur.copy(COPY_ARRIVALS) as cp:
        await cp.write(copy_text(batch, outcomes, ids, keys, now))


def copy_text(
    batch: Sequence[Arrival],
    outcomes: list[decide.Outcome],
    ids: list[int],
    keys: list[bytes],
    now: datetime,
) -> bytes:
    """The COPY text of the arrivals (`COPY_ARRIVALS`' columns), one line per arrival.

    A line is one f-string of values that are text already: only the fields that can hold a
    tab, a newline, a carriage return or a backslash (the ids, the gateway, the reason, the
    CloudEvents id; the timestamps too, to be safe) are looked at, all of a row at once, and a
    row where one of them does is written value by value through `_cell`, which escapes them
    (tests/oracles/copy_oracle.py writes every row so: the tests' oracle). The flags are
    lowercase words, the raw line and the key go as hex.
    """
    received = now.isoformat()
    lines: list[str] = []
    append = lines.append
    kind: str | None
    source: str | None
    phash: str | None
    for aid, arr, oc, key in zip(ids, batch, outcomes, keys, strict=True):
        it = arr.item
        if type(it) is Delivery:
            kind = "transition"
            source, tid, bid, sts, phash = (
                it.source,
                it.transition_id,
                it.boot_id,
                it.source_timestamp,
                it.payload_hash,
            )
        else:
            kind, source, tid, bid, sts, phash = _arrival_row(arr)
        reason, gateway, ce, at = oc.reason, arr.gateway, arr.ce_id, it.arrival_at
        looked = f"{kind}{source}{tid}{bid}{sts}{reason}{gateway}{at}{ce}"
        if "\\" in looked or "\t" in looked or "\n" in looked or "\r" in looked:
            append(_line_by_cell(aid, arr, oc, key, received))
            continue
        raw = it.raw
        cid, attempt, replayed, line, flags = oc.canonical_id, arr.attempt, arr.replayed, it.line, oc.flags
        append(
            f"{aid}\t{_N if kind is None else kind}\t{oc.decision._value_}\t{_N if cid is None else cid}"
            f"\t{_N if source is None else source}\t{_N if tid is None else tid}"
            f"\t{_N if bid is None else bid}\t{_N if sts is None else sts}"
            f"\t{_N if phash is None else phash}\t{_N if reason is None else reason}"
            f"\t{_flags(flags) if flags else '{}'}\t{gateway}\t{at}"
            f"\t{_N if attempt is None else attempt}"
            f"\t{_N if replayed is None else ('t' if replayed else 'f')}\t{received}\t{arr.via}"
            f"\t{_N if line is None else line}\t{_N if ce is None else ce}"
            f"\t\\\\x{(raw if type(raw) is bytes else _raw_bytes(raw)).hex()}\t\\\\x{key.hex()}"
        )
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


_N = "\\N"  # COPY's NULL


def _line_by_cell(aid: int, arr: Arrival, oc: decide.Outcome, key: bytes, received: str) -> str:
    """One arrival's COPY line, every value through `_cell`."""
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
    return "\t".join(map(_cell, row))

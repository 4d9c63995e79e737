"""The outbox's queue head: the rows one claim reads, and their entries (`Claimed`).

The head is found through the `outbox_pending(upstream, state, outbox_id)` index, so a backlog
of millions costs the same per batch as a backlog of ten. `agent.store.outbox` reads it inside
the store's lock (and counts the attempts in the same transaction).
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, overload

import aiosqlite

from agent.core.basis import IdentityBasis
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Record, Transition
from agent.store.connection import on_thread

# The queue head through the outbox_pending(upstream, state, outbox_id) index, with each
# transition's record (most rows) by primary key in the same statement; the other kinds'
# records by primary key in one statement per kind (no join probing four tables per row).
# A transition's kind and the identity basis `counter` (the common row) come back as NULL: None,
# not a new string per row (`agent.core.records.TransitionRow`).
_COUNTER = IdentityBasis.COUNTER.value  # the common basis, NULL in the head query
_HEAD = (
    "SELECT o.outbox_id, NULLIF(o.kind, 'transition'), o.attempts, o.ref_id, e.source, e.transition_id,"
    f" e.boot_id, e.source_ts, e.payload, e.first_arrival, NULLIF(e.identity_basis, '{_COUNTER}')"
    " FROM outbox o LEFT JOIN events e ON o.kind = 'transition' AND e.canonical_id = o.ref_id"
    " WHERE o.upstream = ? AND o.state = 'pending' AND o.outbox_id > ? ORDER BY o.outbox_id LIMIT ?"
)
_RECORDS = {
    "boot_observed": "SELECT boot_row, device, boot_id, previous_boot_id, first_arrival, source_ts, live,"
    " evidence FROM boots WHERE boot_row IN (SELECT value FROM json_each(?))",
    "anomaly": "SELECT anomaly_id, source, boot_id, kind, from_value, to_value, detected_at, evidence"
    " FROM anomalies WHERE anomaly_id IN (SELECT value FROM json_each(?))",
    "identity_incomplete": "SELECT arrival_id, source, transition_id, boot_id, source_ts, arrival_at,"
    " receiver, raw, identity_basis FROM arrivals WHERE arrival_id IN (SELECT value FROM json_each(?))",
}
_TABLE_OF = {"gap": "anomaly"}  # gaps and anomalies are both rows of `anomalies`
_second = operator.itemgetter(1)  # of the head rows: the kind


async def read_head(
    db: aiosqlite.Connection, upstream: str, limit: int, after: int
) -> tuple[list[Any], dict[str, dict[int, Any]]]:
    """Inside the store's lock: the queue head's rows, and the records of the rows that are not
    transitions by table and id (for `Claimed`); one trip to the store's thread (`read_head_on`)."""
    return await on_thread(db, lambda conn: read_head_on(conn, upstream, limit, after))


def read_head_on(
    conn: sqlite3.Connection, upstream: str, limit: int, after: int
) -> tuple[list[Any], dict[str, dict[int, Any]]]:
    """`read_head` on the store's thread (its sqlite3 connection)."""
    rows = conn.execute(_HEAD, (upstream, after, limit)).fetchall()
    records: dict[str, dict[int, Any]] = {}
    if not rows or set(map(_second, rows)) == {None}:  # the common read: all transitions
        return rows, records
    wanted: dict[str, list[int]] = {}
    for r in rows:
        if r[1] is not None:
            wanted.setdefault(_TABLE_OF.get(r[1], r[1]), []).append(r[3])
    for table, refs in wanted.items():
        sql = _RECORDS.get(table)
        found = conn.execute(sql, (ids_json(refs),)).fetchall() if sql is not None else []
        records[table] = {rec[0]: rec for rec in found}
    return rows, records


def ids_json(ids: Sequence[int]) -> str:
    """Outbox ids as a JSON array, for `json_each` (one statement for a whole batch)."""
    return "[" + ",".join(map(str, ids)) + "]"


class Claimed(Sequence[Entry]):
    """The entries of the rows read (the head query's), each built when it is asked for.

    A transition's record is in its row (its id `ref_id` in column 3, its values from column 4
    on; NULL when it is gone), the other kinds' in `records` by table and id. Iterated once (the
    forwarder's encoder), each entry can go as soon as it is encoded: the rows are plain tuples,
    which the garbage collector stops tracking, where a batch's entries and records held at once
    are thousands of named tuples it goes over at every collection while they live.

    `rows` are the head query's rows themselves: a transition's row is an
    `agent.core.records.TransitionRow` (kind None), which the forwarder encodes without building
    its entry; `entry(row)` is the entry of any of them."""

    __slots__ = ("_records", "_rows")

    def __init__(self, rows: list[Any], records: dict[str, dict[int, Any]]) -> None:
        self._rows = rows
        self._records = records

    @property
    def rows(self) -> list[Any]:
        return self._rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...
    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return list(map(self.entry, self._rows[i]))
        return self.entry(self._rows[i])

    def __iter__(self) -> Iterator[Entry]:
        return map(self.entry, self._rows)

    def entry(self, r: Any) -> Entry:
        """The entry of one of `rows`."""
        kind = r[1]
        new = tuple.__new__  # the named tuples built from the row's own values (no __init__ per row)
        if kind is None:  # a transition
            rec = None
            if r[4] is not None:
                rec = new(Transition, r[3:11]) if r[10] is not None else new(Transition, (*r[3:10], _COUNTER))
            return new(Entry, (r[0], "transition", r[3], r[2] + 1, rec))
        return _entry(r, self._records.get(_TABLE_OF.get(kind, kind), {}).get(r[3]))


def _entry(r: Any, rec_row: Any) -> Entry:
    """An outbox row (id, kind, attempts, ref_id) with its record's row (None: gone)."""
    kind = r[1]
    rec: Record | None = None
    if rec_row is None:
        pass
    elif kind == "boot_observed":
        x = rec_row
        rec = BootObserved(x[0], x[1], x[2], x[3], x[4], x[5], bool(x[6]), x[7])
    elif kind in ("gap", "anomaly"):
        rec = ChannelAnomaly(*rec_row)
    elif kind == "identity_incomplete":
        x = rec_row
        raw = x[7]
        text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "backslashreplace")
        rec = IdentityIncomplete(x[0], x[1], x[2], x[3], x[4], x[5], x[6], text, x[8] or "counter")
    return Entry(outbox_id=r[0], kind=kind, ref_id=r[3], attempt=int(r[2]) + 1, record=rec)

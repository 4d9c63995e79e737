"""Outbox queries: claim pending rows in order, settle them, count them, requeue them.

Every row is (upstream, kind, ref_id) with a state: `pending` (still to go),
`delivered` (acknowledged upstream) or `rejected` (dead letter: refused by the
upstream, never retried automatically). `attempts` counts delivery attempts
of that row for that upstream.

Crash safety, step by step (one forwarder per upstream and store):
1. `claim()` reads the first pending rows (insertion order; after a given id) joined with their
   records and commits `attempts + 1` for them *before* anything is sent
   (`settle_and_claim_prepared()` commits one batch's outcomes and the next rows' attempts
   together, hands the next rows to the caller's encoder while that transaction is written,
   and returns only once it is committed). A
   crash afterwards resends them with the next attempt number, same ids.
2. The sink publishes and waits for acknowledgements.
3. `settle()` commits delivered / rejected / retry for the whole batch in one
   transaction. A crash between 2 and 3 is the "at least once" case: the
   upstream sees the event again with `attempt` + 1 and the same (source, id).

Nothing here holds more than one batch in memory: the queue head is found
through the `outbox_pending(upstream, state, outbox_id)` index, so a backlog
of millions costs the same per batch as a backlog of ten.

Every read and write goes through the store's lock: a transaction belongs to
the connection, so an unlocked read could see a half-written `record()` batch
(and publish an event that is then rolled back). `upstream_counts()` also serves
the reader's own connection. Nothing here imports a sink.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, overload

import aiosqlite

from agent.core.basis import IdentityBasis
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Record, Transition
from agent.core.send_outcome import SendOutcome, Verdict, all_delivered
from agent.store.connection import WriterConnection, on_thread

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

_DELIVERED = (
    "UPDATE outbox SET state = 'delivered', sent_at = ?"
    " WHERE outbox_id IN (SELECT value FROM json_each(?)) AND state = 'pending'"
)
HANDOFF_S = 0.005  # at most this long the event loop waits for the settle's first statement to begin

MAX_ERROR_CHARS = 500

_first, _second = operator.itemgetter(0), operator.itemgetter(1)  # of (outbox_id, outcome) pairs

T = TypeVar("T")


class BatchOutcomes(NamedTuple):
    """One batch's outcomes as two lists in the same order, the outbox ids and what each came to
    (the forwarder's form of a settle: no pair built per row)."""

    ids: list[int]
    outcomes: list[SendOutcome]


Results = Sequence[tuple[int, SendOutcome]] | BatchOutcomes  # what a settle takes


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


class Outbox:
    """Outbox operations on the store's writer connection (its lock and transactions)."""

    def __init__(self, store: WriterConnection) -> None:
        self.store = store

    async def claim(self, upstream: str, limit: int, *, after: int = 0) -> list[Entry]:
        """The first `limit` pending rows of `upstream` after outbox id `after`, in insertion order,
        with `attempts + 1` committed. `after` lets a forwarder claim the next rows while the rows
        it claimed before are still in flight (and so still pending)."""
        return list(await self.claim_rows(upstream, limit, after=after))

    async def claim_rows(self, upstream: str, limit: int, *, after: int = 0) -> Claimed:
        """`claim()`, its entries as `Claimed` (each built when asked for; the rows themselves for
        the forwarder's encoder)."""
        store = self.store
        async with store.lock:
            rows, records = await self._read_rows(upstream, limit, after)
            if rows:
                async with store.transaction():
                    await self._count_attempts(list(map(_first, rows)))
        return Claimed(rows, records)

    async def settle(self, results: Results, now: str) -> None:
        """Record the outcome of every (outbox_id, outcome) of one batch in one transaction.
        The delivered rows (most of a batch) are one statement over the list of their ids."""
        store = self.store
        async with store.lock, store.transaction():
            await self._settle(results, now)

    async def settle_and_claim_prepared(
        self,
        results: Results,
        now: str,
        upstream: str,
        limit: int,
        *,
        after: int,
        prepare: Callable[[Claimed], Awaitable[T]] | None = None,
    ) -> tuple[Claimed, T | None]:
        """`settle(results, now)` and then `claim(upstream, limit, after=after)` in one transaction
        (one commit instead of two per batch: on an error neither is committed), and
        `await prepare(entries)` on the next rows while the outcomes and
        their attempts are being written and committed (on the store's thread): the next rows are
        read first in the transaction, handed to `prepare`, and returned with its result once the
        transaction is committed. Nothing may be sent before this returns (the attempts are
        committed only then); when the transaction fails, the error is raised and what `prepare`
        made must be thrown away. `prepare` must yield now and then (`await asyncio.sleep(0)`),
        else the store's statements wait for it."""
        store = self.store
        async with store.lock:
            read: asyncio.Future[Claimed] = asyncio.get_running_loop().create_future()

            async def write() -> None:
                async with store.transaction():
                    rows, records = await self._read_rows(upstream, limit, after)
                    # The outcomes are written on the store's thread while the rows read become
                    # entries here (the task's first statement is queued before they are built).
                    started = threading.Event()
                    settling = asyncio.ensure_future(self._settle(results, now, started))
                    try:
                        await asyncio.sleep(0)
                        entries = Claimed(rows, records)
                        # The interpreter lock handed to the store's thread until its first statement
                        # has begun (it lets the lock go while SQLite steps): else it waits for the
                        # lock until the rows are encoded, the loop taking it back at every turn.
                        started.wait(HANDOFF_S)
                        del rows, records
                        read.set_result(entries)
                    finally:
                        await settling
                    if entries:
                        # The rows read are every pending row of `upstream` from the first to the
                        # last of them: this transaction holds the write lock since before the read,
                        # and the settle above changes only rows up to `after`.
                        first, last = entries[0].outbox_id, entries[-1].outbox_id
                        await self._count_attempts_range(upstream, first, last)

            task = asyncio.create_task(write(), name=f"settle[{upstream}]")
            prepared: T | None = None
            try:
                waits: set[asyncio.Future[Any]] = {read, task}
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if read.done() and prepare is not None:
                    prepared = await prepare(read.result())
            finally:
                # The transaction ends (committed or rolled back) before the lock is let go.
                await asyncio.wait({task})
            task.result()  # the store's error, if any: then nothing of this is committed
            return read.result(), prepared

    async def _read_rows(
        self, upstream: str, limit: int, after: int
    ) -> tuple[list[Any], dict[str, dict[int, Any]]]:
        """Inside the lock: the queue head's rows, and the records of the rows that are not
        transitions by table and id (for `_entries`)."""
        db = self.store.db
        rows = list(await db.execute_fetchall(_HEAD, (upstream, after, limit)))
        records: dict[str, dict[int, Any]] = {}
        if not rows or set(map(_second, rows)) == {None}:  # the common read: all transitions
            return rows, records
        wanted: dict[str, list[int]] = {}
        for r in rows:
            if r[1] is not None:
                wanted.setdefault(_TABLE_OF.get(r[1], r[1]), []).append(r[3])
        for table, refs in wanted.items():
            sql = _RECORDS.get(table)
            found = await db.execute_fetchall(sql, (_ids(refs),)) if sql is not None else []
            records[table] = {rec[0]: rec for rec in found}
        return rows, records

    async def _count_attempts(self, ids: list[int]) -> None:
        """Inside the lock and a transaction: `attempts + 1` for the rows read (their outbox ids)."""
        await self.store.db.execute(
            "UPDATE outbox SET attempts = attempts + 1"
            " WHERE outbox_id IN (SELECT value FROM json_each(?)) AND state = 'pending'",
            (_ids(ids),),
        )

    async def _count_attempts_range(self, upstream: str, first: int, last: int) -> None:
        """Inside the lock and the transaction that read them: `attempts + 1` for the rows read,
        which are exactly the pending rows of `upstream` with ids from `first` to `last`."""
        await self.store.db.execute(
            "UPDATE outbox SET attempts = attempts + 1"
            " WHERE upstream = ? AND state = 'pending' AND outbox_id BETWEEN ? AND ?",
            (upstream, first, last),
        )

    async def _settle(self, results: Results, now: str, started: threading.Event | None = None) -> None:
        """Inside the lock and a transaction: write each row's outcome. `started` is set once the
        first statement has begun on the store's thread (or when there is none)."""
        if isinstance(results, BatchOutcomes):
            ids, outcomes = results
        else:
            ids, outcomes = list(map(_first, results)), list(map(_second, results))
        refused: list[tuple[str, int]] = []
        retried: list[tuple[str, int]] = []
        if all_delivered(outcomes):  # the common batch: no per-row test
            delivered = ids
        else:
            pairs = list(zip(ids, outcomes, strict=True))
            delivered = [oid for oid, oc in pairs if oc.verdict is Verdict.DELIVERED]
            refused = [(_err(oc), oid) for oid, oc in pairs if oc.verdict is Verdict.REJECTED]
            retried = [(_err(oc), oid) for oid, oc in pairs if oc.verdict is Verdict.RETRY]
        db = self.store.db
        if delivered:
            params = (now, _ids(delivered))

            def deliver(conn: sqlite3.Connection) -> None:
                if started is None:
                    conn.execute(_DELIVERED, params)
                    return
                # Set from inside SQLite's step, once the statement runs (without the lock).
                conn.set_trace_callback(lambda _: started.set())
                try:
                    conn.execute(_DELIVERED, params)
                finally:
                    conn.set_trace_callback(None)
                    started.set()

            await on_thread(db, deliver)
        elif started is not None:
            started.set()
        if refused:
            await db.executemany(
                "UPDATE outbox SET state = 'rejected', last_error = ?"
                " WHERE outbox_id = ? AND state = 'pending'",
                refused,
            )
        if retried:
            await db.executemany("UPDATE outbox SET last_error = ? WHERE outbox_id = ?", retried)

    async def last_pending_id(self, upstream: str) -> int:
        """The newest pending row's id (0 when none): the end of the backlog right now."""
        async with self.store.lock:
            rows = await self.store.db.execute_fetchall(
                "SELECT max(outbox_id) FROM outbox WHERE upstream = ? AND state = 'pending'", (upstream,)
            )
        return int(next(iter(rows))[0] or 0)

    async def counts(self) -> list[UpstreamCounts]:
        """Per registered upstream (and any upstream that still has rows): counts kept apart."""
        async with self.store.lock:
            return await upstream_counts(self.store.db)

    async def deliver_all_pending(self, upstream: str, sent_at: str) -> int:
        """Mark every pending row of `upstream` delivered, as if it had acknowledged them all
        (benchmarks and tests stand in for a forwarder with it). Returns the rows changed."""
        async with self.store.lock, self.store.transaction():
            cur = await self.store.db.execute(
                "UPDATE outbox SET state = 'delivered', sent_at = ? WHERE upstream = ? AND state = 'pending'",
                (sent_at, upstream),
            )
            return int(cur.rowcount)

    async def retry_rejected(self, upstream: str | None = None, ids: Sequence[int] = ()) -> int:
        """Put dead letters back in the queue (all, one upstream's, or the given outbox ids)."""
        where, params = _scope(upstream, ids)
        async with self.store.lock, self.store.transaction():
            cur = await self.store.db.execute(
                f"UPDATE outbox SET state = 'pending' WHERE state = 'rejected'{where}", params
            )
            return int(cur.rowcount)

    async def replay(self, upstream: str, since: str, until: str | None = None) -> int:
        """Queue delivered rows of `upstream` recorded in [since, until) again; same ids, next attempt."""
        sql = (
            "UPDATE outbox SET state = 'pending'"
            " WHERE upstream = ? AND state = 'delivered' AND created_at >= ?"
        )
        params: list[Any] = [upstream, since]
        if until is not None:
            sql += " AND created_at < ?"
            params.append(until)
        async with self.store.lock, self.store.transaction():
            cur = await self.store.db.execute(sql, params)
            return int(cur.rowcount)


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
    return UpstreamCounts(
        upstream=name,
        pending=by_state.get("pending", 0),
        delivered=by_state.get("delivered", 0),
        rejected=by_state.get("rejected", 0),
        attempts=attempts,
        oldest_pending_at=h[0] if h else None,
        head_error=h[1] if h else None,
        last_rejection=lr[0] if lr else None,
    )


def _scope(upstream: str | None, ids: Sequence[int]) -> tuple[str, list[Any]]:
    where = ""
    params: list[Any] = []
    if upstream is not None:
        where += " AND upstream = ?"
        params.append(upstream)
    if ids:
        where += f" AND outbox_id IN ({','.join('?' for _ in ids)})"
        params.extend(int(i) for i in ids)
    return where, params


def _ids(ids: Sequence[int]) -> str:
    """Outbox ids as a JSON array, for `json_each` (one statement for a whole batch)."""
    return "[" + ",".join(map(str, ids)) + "]"


def _err(oc: SendOutcome) -> str:
    return (oc.reason or oc.verdict.value)[:MAX_ERROR_CHARS]


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

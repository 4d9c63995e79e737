"""Outbox queries: claim pending rows in order, settle them, count them, requeue them.

A row is (upstream, kind, ref_id) with a state (`pending`, `sent`, `delivered`, `rejected`) and
its `attempts`; the states, the receipts (`confirm`, `requeue_sent`) and the crash safety step by
step are in docs/architecture.md ("The outbox"). The rules this module keeps:

* a claim commits `attempts + 1` *before* anything is sent (`settle_and_claim_prepared()`: with
  the last batch's outcomes, in one transaction): a crash resends with the next attempt, same ids;
* nothing holds more than one batch in memory: the queue head is found through the
  `outbox_pending(upstream, state, outbox_id)` index, so a backlog of millions costs the same per
  batch as one of ten (`agent.store.outbox_head` reads it; `agent.store.outbox_counts` counts);
* every read and write goes through the store's lock: a transaction belongs to the connection,
  so an unlocked read could see a half-written `record()` batch (and publish an event that is
  then rolled back). Nothing here imports a sink.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from agent.core.records import Entry
from agent.core.send_outcome import SendOutcome, Verdict, all_delivered
from agent.store.connection import WriterConnection
from agent.store.outbox_counts import UpstreamCounts, upstream_counts
from agent.store.outbox_head import Claimed, ids_json, read_head, read_head_on

_DELIVERED = (
    "UPDATE outbox SET state = 'delivered', sent_at = ?"
    " WHERE outbox_id IN (SELECT value FROM json_each(?)) AND state = 'pending'"
)
_SENT = (  # a receipts upstream's PUBACK: the broker has the row, the ledger may not
    "UPDATE outbox SET state = 'sent', sent_at = ?"
    " WHERE outbox_id IN (SELECT value FROM json_each(?)) AND state = 'pending'"
)
_CONFIRMED = (
    "UPDATE outbox SET state = 'delivered', sent_at = coalesce(sent_at, ?)"
    " WHERE upstream = ? AND outbox_id IN (SELECT value FROM json_each(?)) AND state IN ('pending', 'sent')"
)
_ATTEMPTS_RANGE = (  # the rows whose first attempt the record transaction reserved are left out
    "UPDATE outbox SET attempts = attempts + 1"
    " WHERE upstream = ? AND state = 'pending' AND outbox_id BETWEEN ? AND ?"
    " AND NOT (outbox_id >= ? AND attempts = 1)"
)
NONE_RESERVED = 1 << 62  # an outbox id no row reaches: nothing reserved

MAX_ERROR_CHARS = 500

_first, _second = operator.itemgetter(0), operator.itemgetter(1)  # of (outbox_id, outcome) pairs

T = TypeVar("T")


def _reserved(row: Any, start: int) -> bool:
    """A head row whose first attempt the record transaction counted, not yet handed out."""
    return bool(row[0] >= start and row[2] == 1)


def as_handed(rows: list[Any], start: int) -> list[Any]:
    """The head rows as the encoder gets them: a reserved row (from `start` on, `attempts` 1) goes
    as attempt 1, so it is read as `attempts` 0 (the entry's attempt is `attempts + 1`)."""
    if not rows or rows[-1][0] < start:
        return rows
    return [(r[0], r[1], 0, *r[3:]) if _reserved(r, start) else r for r in rows]


class BatchOutcomes(NamedTuple):
    """One batch's outcomes as two lists in the same order, the outbox ids and what each came to
    (the forwarder's form of a settle: no pair built per row)."""

    ids: list[int]
    outcomes: list[SendOutcome]


Results = Sequence[tuple[int, SendOutcome]] | BatchOutcomes  # what a settle takes


class Outbox:
    """Outbox operations on the store's writer connection (its lock and transactions)."""

    def __init__(self, store: WriterConnection) -> None:
        self.store = store
        # Upstreams whose forwarder runs in this process: the record transaction commits the
        # first attempt of their new rows (`attempts = 1`) with the rows, so handing those rows to
        # the forwarder needs no transaction of its own (one commit, and its pages, less per
        # batch: docs/performance.md, "Flash").
        self.reserving: set[str] = set()
        # Per upstream, the first outbox id whose reserved first attempt no claim of this process
        # has handed out yet: a row at or after it with `attempts = 1` is reserved. Kept only in
        # memory: after a restart nothing is reserved, and such a row is claimed as any other
        # (attempt 2, as for a crash between a claim and its send).
        self.reserved_from: dict[str, int] = {}

    def note_reserved(self, firsts: dict[str, int]) -> None:
        """The record transaction committed rows with their first attempt reserved, from these ids."""
        for upstream, first in firsts.items():
            self.reserved_from.setdefault(upstream, first)

    def _hand_out(self, upstream: str, rows: list[Any]) -> tuple[list[Any], list[int]]:
        """(the rows as handed to the encoder, the ids whose attempt a transaction must count)."""
        start = self.reserved_from.get(upstream, NONE_RESERVED)
        return as_handed(rows, start), [r[0] for r in rows if not _reserved(r, start)]

    def _handed_out(self, upstream: str, rows: list[Any]) -> None:
        """Rows up to the last of `rows` were handed out: none of them is reserved any more."""
        if rows and upstream in self.reserved_from:
            self.reserved_from[upstream] = max(self.reserved_from[upstream], rows[-1][0] + 1)

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
            rows, records = await read_head(self.store.db, upstream, limit, after)
            if rows:
                rows, count = self._hand_out(upstream, rows)
                if count:
                    async with store.transaction():
                        await self._count_attempts(count)
                self._handed_out(upstream, rows)
        return Claimed(rows, records)

    async def settle(self, results: Results, now: str, *, receipts: bool = False) -> None:
        """Record the outcome of every (outbox_id, outcome) of one batch in one transaction, in one
        trip to the store's thread. The delivered rows (most of a batch) are one statement over the
        list of their ids. With `receipts`, an acknowledged row becomes `sent`, not `delivered`."""
        store = self.store
        plan = _plan(results, receipts)
        async with store.lock:
            await store.transact(lambda conn: _settle_on(conn, plan, now))

    async def settle_and_claim_prepared(
        self,
        results: Results,
        now: str,
        upstream: str,
        limit: int,
        *,
        after: int,
        prepare: Callable[[Claimed], Awaitable[T]] | None = None,
        receipts: bool = False,
    ) -> tuple[Claimed, T | None]:
        """`settle(results, now)` and then `claim(upstream, limit, after=after)` in one transaction
        (one commit instead of two per batch: on an error neither is committed), and
        `await prepare(entries)` on the next rows while the outcomes and their attempts are being
        written and committed on the store's thread (`_settle_and_claim`): the rows are returned
        with its result once the transaction is committed. Nothing may be sent before this returns
        (the attempts are committed only then); when the transaction fails, the error is raised and
        what `prepare` made must be thrown away. `prepare` should yield now and then
        (`await asyncio.sleep(0)`), so the store's thread gets the interpreter lock between its
        statements."""
        store = self.store
        loop = asyncio.get_running_loop()
        read: asyncio.Future[Claimed] = loop.create_future()
        plan = _plan(results, receipts)
        reserved_from = self.reserved_from.get(upstream, NONE_RESERVED)  # held under the lock below
        cycle = _settle_and_claim(loop, read, plan, now, (upstream, limit, after, reserved_from))
        async with store.lock:
            task = asyncio.ensure_future(store.transact(cycle))
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
            self._handed_out(upstream, read.result().rows)
            return read.result(), prepared

    async def _count_attempts(self, ids: list[int]) -> None:
        """Inside the lock and a transaction: `attempts + 1` for the rows read (their outbox ids)."""
        await self.store.db.execute(
            "UPDATE outbox SET attempts = attempts + 1"
            " WHERE outbox_id IN (SELECT value FROM json_each(?)) AND state = 'pending'",
            (ids_json(ids),),
        )

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

    async def confirm(self, upstream: str, ids: Sequence[int], now: str) -> int:
        """A receipt: the rows of `upstream` it names (outbox ids) are committed upstream; each
        `sent` or `pending` one becomes `delivered`. Returns the rows changed (ids of other
        upstreams, of rows already delivered or pruned change nothing)."""
        if not ids:
            return 0
        async with self.store.lock, self.store.transaction():
            cur = await self.store.db.execute(_CONFIRMED, (now, upstream, ids_json([int(i) for i in ids])))
            return int(cur.rowcount)

    async def requeue_sent(self, upstream: str, sent_before: str | None = None) -> int:
        """`sent` rows of `upstream` (all, or those sent before `sent_before`) back to `pending`:
        their receipt is overdue or can no longer come. Returns the rows changed."""
        sql = "UPDATE outbox SET state = 'pending' WHERE upstream = ? AND state = 'sent'"
        params: list[Any] = [upstream]
        if sent_before is not None:
            sql += " AND sent_at < ?"
            params.append(sent_before)
        async with self.store.lock, self.store.transaction():
            cur = await self.store.db.execute(sql, params)
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


class _Plan(NamedTuple):
    """One batch's outcomes as the settle's statements take them (made on the loop)."""

    delivered: str | None  # the delivered rows' ids as a JSON array
    refused: list[tuple[str, int]]  # (error, outbox id)
    retried: list[tuple[str, int]]
    receipts: bool = False  # acknowledged rows become `sent` (a receipt makes them `delivered`)


def _settle_and_claim(
    loop: asyncio.AbstractEventLoop,
    read: asyncio.Future[Claimed],
    plan: _Plan,
    now: str,
    head: tuple[str, int, int, int],
) -> Callable[[sqlite3.Connection], None]:
    """The transaction of `Outbox.settle_and_claim_prepared` for the store's thread, `head` being
    (upstream, limit, after, the first reserved id). One trip to that thread (BEGIN, the head
    query, the outcomes, the attempts, COMMIT), so no statement waits for a turn of the loop to be
    queued: the rows read are handed to the loop (`read`) once the outcomes' UPDATE has begun (it
    then runs beside the caller's `prepare`, without the interpreter lock), and the attempts and
    the COMMIT follow it on the thread."""
    upstream, limit, after, reserved_from = head

    def hand(rows: list[Any], records: dict[str, dict[int, Any]]) -> None:  # on the loop
        if not read.done():
            read.set_result(Claimed(rows, records))

    def cycle(conn: sqlite3.Connection) -> None:  # on the store's thread, inside the transaction
        rows, records = read_head_on(conn, upstream, limit, after)
        rows = as_handed(rows, reserved_from)
        # Handed to the loop from inside the outcomes' UPDATE (SQLite's trace callback, called
        # once the statement runs, which it does without the interpreter lock): handed before
        # it, the thread would wait for the lock while the loop works on the rows.
        handed: list[bool] = []

        def handover(_: str) -> None:
            if not handed:
                handed.append(True)
                loop.call_soon_threadsafe(hand, rows, records)

        conn.set_trace_callback(handover)
        try:
            _settle_on(conn, plan, now)
        finally:
            conn.set_trace_callback(None)
            handover("")  # no statement ran (nothing to settle): hand the rows over now
        if rows:
            # The rows read are every pending row of `upstream` from the first to the last of
            # them: this transaction holds the write lock since before the read, and the
            # settle above changes only rows up to `after`.
            conn.execute(_ATTEMPTS_RANGE, (upstream, rows[0][0], rows[-1][0], reserved_from))

    return cycle


def _plan(results: Results, receipts: bool = False) -> _Plan:
    if isinstance(results, BatchOutcomes):
        ids, outcomes = results
    else:
        ids, outcomes = list(map(_first, results)), list(map(_second, results))
    if all_delivered(outcomes):  # the common batch: no per-row test
        return _Plan(ids_json(ids) if ids else None, [], [], receipts)
    pairs = list(zip(ids, outcomes, strict=True))
    delivered = [oid for oid, oc in pairs if oc.verdict is Verdict.DELIVERED]
    refused = [(_err(oc), oid) for oid, oc in pairs if oc.verdict is Verdict.REJECTED]
    retried = [(_err(oc), oid) for oid, oc in pairs if oc.verdict is Verdict.RETRY]
    return _Plan(ids_json(delivered) if delivered else None, refused, retried, receipts)


def _settle_on(conn: sqlite3.Connection, plan: _Plan, now: str) -> None:
    """On the store's thread, inside the lock and a transaction: write each row's outcome."""
    if plan.delivered is not None:
        conn.execute(_SENT if plan.receipts else _DELIVERED, (now, plan.delivered))
    if plan.refused:
        conn.executemany(
            "UPDATE outbox SET state = 'rejected', last_error = ? WHERE outbox_id = ? AND state = 'pending'",
            plan.refused,
        )
    if plan.retried:
        conn.executemany("UPDATE outbox SET last_error = ? WHERE outbox_id = ?", plan.retried)


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


def _err(oc: SendOutcome) -> str:
    return (oc.reason or oc.verdict.value)[:MAX_ERROR_CHARS]

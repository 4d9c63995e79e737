"""The record transaction: one batch of deliveries decided and written, as named steps.

Runs inside the caller's BEGIN IMMEDIATE (`Store.record`), on the connection's own thread: plain
sqlite3 calls, so that the whole transaction is one trip there (`WriterConnection.transact`)
rather than one per statement. The decision itself is the pure `agent.core.decide`. Never opens,
commits or rolls back a transaction here.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

from agent.core import decide
from agent.core.contract import Anomaly, Decision, Delivery, Key, Rejection
from agent.core.errors import StoreError
from agent.store import rows, tally
from agent.store.boots import known_boots, record_anomalies, record_boots
from agent.store.outbox_queue import queue_outbox

log = logging.getLogger(__name__)

CHUNK = 3000  # keys per VALUES list: 3 parameters each, far below SQLite's 32766
PARAMS_PER_INSERT = 30_000  # parameters of one multi-row INSERT, below SQLite's 32766 (3.32+)


@dataclass(frozen=True, slots=True)
class Marks:
    """Read inside BEGIN IMMEDIATE, so a prune by another process cannot slip in between."""

    max_canonical: int
    last_arrival_id: int
    has_key_records: bool
    has_forgotten: bool


def record_batch(
    db: sqlite3.Connection,
    path: str,
    items: Sequence[Delivery | Rejection],
    sightings: Sequence[decide.BootSighting],
    anomalies: Sequence[Anomaly],
    now: str,
    upstreams: Sequence[str],
    *,
    reserving: Collection[str] = (),
    reserved: dict[str, int] | None = None,
) -> list[decide.Outcome]:
    """Decide and write one batch; returns one Outcome per item, in order. The new outbox rows of
    the upstreams in `reserving` are written with their first attempt counted (`attempts = 1`:
    their forwarder hands them out without a transaction of its own); the first such row's id per
    upstream goes into `reserved`."""
    marks = read_marks(db)
    arrival_ids = [marks.last_arrival_id + 1 + i for i in range(len(items))]
    firsts = first_deliveries(items)
    canonical, pruned, new, first_at = look_up_canonicals(db, path, firsts, marks)
    forgotten = forgotten_of(db, list(firsts)) if marks.has_forgotten and firsts else None
    outcomes, updates = decide.classify(
        items, canonical, marks.max_canonical, pruned=pruned, forgotten=forgotten
    )
    # The events this batch creates are inserted with the counts of their later arrivals in the
    # batch; events stored before the batch get theirs by an UPDATE, or in the tally.
    insert_canonicals(db, path, new, arrival_ids, marks, updates)
    insert_arrivals(db, items, arrival_ids, outcomes)
    update_counts(db, [u for u in updates if u.canonical_id <= marks.max_canonical], pruned, first_at)
    if pruned or forgotten:
        record_retention_side(db, outcomes, updates, pruned)
    # Sightings read straight from a controller come first: they carry the real evidence
    # (register or node, previous value, OPC UA StartTime) for a boot the batch also shows.
    boot_rows = batch_boots(db, sightings, items, arrival_ids)
    pending = insert_pending(db, arrival_ids, outcomes)
    anomaly_refs = record_anomalies(db, anomalies)
    if upstreams:
        refs = [
            ("transition", oc.canonical_id)
            for oc in outcomes
            if oc.decision is Decision.INSERTED and oc.canonical_id is not None
        ]
        refs += [("boot_observed", b) for b in boot_rows]
        refs += anomaly_refs
        refs += [("identity_incomplete", a) for a in pending]
        first_reserved = queue_outbox(db, upstreams, refs, now, reserving)
        if reserved is not None:
            reserved.update(first_reserved)
    return outcomes


def batch_boots(
    db: sqlite3.Connection,
    sightings: Sequence[decide.BootSighting],
    items: Sequence[Delivery | Rejection],
    arrival_ids: list[int],
) -> list[int]:
    """BootObserved rows for the new boots the batch shows; returns their row ids.

    The sightings of the deliveries (each with its evidence, about 0.3 ms for a batch of 300
    pairs) are made only when the store does not know every (device, bootId) of the batch
    already, which is nearly always the case past a device's first batch."""
    if sightings:
        return record_boots(db, [*sightings, *decide.sightings_of(items)], arrival_ids)
    pairs = decide.boot_pairs(items)  # the pairs sightings_of(items) would make sightings of
    known = known_boots(db, list(pairs)) if pairs else set()
    if len(known) == len(pairs):
        return []
    return record_boots(db, decide.sightings_of(items), arrival_ids, known)


def read_marks(db: sqlite3.Connection) -> Marks:
    found = db.execute(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='events'), 0),"
        "           coalesce((SELECT max(canonical_id) FROM events), 0)),"
        " max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='arrivals'), 0),"
        "     coalesce((SELECT max(arrival_id) FROM arrivals), 0)),"
        " EXISTS(SELECT 1 FROM event_keys), EXISTS(SELECT 1 FROM forgotten_keys)"
    ).fetchall()
    row = next(iter(found))
    return Marks(int(row[0]), int(row[1]), bool(row[2]), bool(row[3]))


def first_deliveries(items: Sequence[Delivery | Rejection]) -> dict[Key, tuple[Delivery, int]]:
    """The first complete delivery of every key of the batch, with its position."""
    firsts: dict[Key, tuple[Delivery, int]] = {}
    for i, item in enumerate(items):
        if isinstance(item, Delivery) and (key := item.key) is not None and key not in firsts:
            firsts[key] = (item, i)
    return firsts


def look_up_canonicals(
    db: sqlite3.Connection,
    path: str,
    firsts: dict[Key, tuple[Delivery, int]],
    marks: Marks,
) -> tuple[dict[Key, tuple[int, str]], set[int], list[tuple[Key, Delivery, int]], dict[int, str]]:
    """(canonical of every key, pruned ids, the keys to insert with their first delivery, the
    `first_arrival` of every canonical stored before the batch).

    The keys already stored are read (one indexed look-up per key, with the compact key records
    once retention made some); each new key gets the id its insert will get: with AUTOINCREMENT
    under BEGIN IMMEDIATE (we are the only writer) the next ones, in insertion order, and the
    canonical content is its first delivery's. Once retention has pruned payloads, a key may live
    on only as a compact key record (the unique index of `events` no longer sees it): the
    look-up finds it there, so no second canonical is made for it.
    """
    if not firsts:
        return {}, set(), [], {}
    first_at: dict[int, str] = {}
    known, pruned = canonical_of(
        db, path, list(firsts), marks.has_key_records, complete=False, first_at=first_at
    )
    new = [(key, d, i) for key, (d, i) in firsts.items() if key not in known]
    for n, (key, d, _) in enumerate(new, marks.max_canonical + 1):
        known[key] = (n, d.payload_hash)
    return known, pruned, new, first_at


def insert_canonicals(
    db: sqlite3.Connection,
    path: str,
    new: list[tuple[Key, Delivery, int]],
    arrival_ids: list[int],
    marks: Marks,
    updates: Sequence[decide.EventUpdate],
) -> None:
    """Insert the new keys' canonical events (one statement, or a few), each with what the batch's
    later arrivals of it add (`updates`: counts, status, first and last arrival), as the UPDATE
    of the counts would have set them."""
    if not new:
        return
    first_new = marks.max_canonical + 1
    added = {u.canonical_id: u for u in updates if u.canonical_id >= first_new}
    changed = insert_many(
        db,
        rows.COUNTED_EVENT_COLUMNS,
        rows.COUNTED_EVENT_WIDTH,
        [
            rows.counted_event_row(key, d, arrival_ids[i], added.get(n))
            for n, (key, d, i) in enumerate(new, first_new)
        ],
        " ON CONFLICT(source, transition_id, boot_id) DO NOTHING",
    )
    if changed != len(new):  # cannot happen inside BEGIN IMMEDIATE: the whole batch rolls back
        raise StoreError(
            f"Store {path}: {len(new) - changed} of {len(new)} new keys were stored by another"
            " writer inside this transaction; nothing of the batch is recorded"
        )


@lru_cache(maxsize=64)
def _values_sql(head: str, width: int, n: int, tail: str) -> str:
    one = "(" + ",".join("?" * width) + ")"
    return f"{head} VALUES {','.join([one] * n)}{tail}"


def insert_many(
    db: sqlite3.Connection, head: str, width: int, params: list[tuple[Any, ...]], tail: str = ""
) -> int:
    """`head VALUES (..),(..) tail` for `params` (rows of `width` values); returns rows changed.

    One statement per row (`executemany`) costs SQLite a statement run per row, and each call
    a trip to the connection's thread; here the rows of a batch of 1,000 take one statement."""
    changed = 0
    per = PARAMS_PER_INSERT // width
    for start in range(0, len(params), per):
        chunk = params[start : start + per]
        # chain.from_iterable flattens in C: a third of the time of a nested comprehension
        cur = db.execute(_values_sql(head, width, len(chunk), tail), list(chain.from_iterable(chunk)))
        changed += cur.rowcount
    return changed


def keyed_events(keys: Sequence[Key], columns: str) -> tuple[str, list[Any]]:
    """The select of `columns` of the events (`e`) these keys name, and its parameters. The keys
    stand in a CTE `k(s, t, b)` joined on the indexed columns: it uses the unique index, where
    `(a,b,c) IN (VALUES ...)` scans the whole table in SQLite 3.40."""
    values = ",".join("(?,?,?)" for _ in keys)
    sql = (
        f"WITH k(s, t, b) AS (VALUES {values}) SELECT {columns} FROM k JOIN events e"
        " ON e.source = k.s AND e.transition_id = k.t AND e.boot_id = k.b"
    )
    return sql, [p for k in keys for p in (k.source, k.transition_id, k.boot_id)]


def canonical_of(
    db: sqlite3.Connection,
    path: str,
    keys: list[Key],
    with_key_records: bool = False,
    *,
    complete: bool = True,
    first_at: dict[int, str] | None = None,
) -> tuple[dict[Key, tuple[int, str]], set[int]]:
    """Read (canonical_id, payload_hash) of the keys stored, one query per chunk.

    With `with_key_records`, keys whose payload was pruned are read from their compact key
    record; their canonical ids are returned as the second value. With `complete` (a read-back
    after the insert), every key must be found. `first_at`, when given, is filled with the
    `first_arrival` of every canonical id found (it comes with the row that is read anyway).
    """
    found: dict[Key, tuple[int, str]] = {}
    pruned: set[int] = set()
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start : start + CHUNK]
        sql, params = keyed_events(
            chunk, "e.source, e.transition_id, e.boot_id, e.canonical_id, e.payload_hash, 0, e.first_arrival"
        )
        if with_key_records:
            sql += (
                " UNION ALL SELECT x.source, x.transition_id, x.boot_id, x.canonical_id,"
                " lower(hex(x.payload_hash)), 1, x.first_arrival FROM k JOIN event_keys x"
                " ON x.source = k.s AND x.transition_id = k.t AND x.boot_id = k.b"
            )
        for r in db.execute(sql, params).fetchall():
            found[Key(r[0], r[1], r[2])] = (int(r[3]), str(r[4]))
            if r[5]:
                pruned.add(int(r[3]))
            if first_at is not None:
                first_at[int(r[3])] = str(r[6])
    missing = [k for k in keys if k not in found] if complete else []
    if missing:  # cannot happen inside BEGIN IMMEDIATE unless the schema is broken
        raise StoreError(f"Store {path}: canonical rows vanished for {len(missing)} keys")
    return found, pruned


def forgotten_of(db: sqlite3.Connection, keys: list[Key]) -> dict[tuple[str, str], str]:
    """(source, bootId) -> latest arrival of a key forgotten at the key horizon, for these keys."""
    pairs = list(dict.fromkeys((k.source, k.boot_id) for k in keys))
    out: dict[tuple[str, str], str] = {}
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start : start + CHUNK]
        values = ",".join("(?,?)" for _ in chunk)
        found = db.execute(
            f"WITH p(s, b) AS (VALUES {values}) SELECT f.source, f.boot_id, f.through_arrival"
            " FROM p JOIN forgotten_keys f ON f.source = p.s AND f.boot_id = p.b",
            [x for pair in chunk for x in pair],
        ).fetchall()
        out.update({(r[0], r[1]): str(r[2]) for r in found})
    return out


def insert_arrivals(
    db: sqlite3.Connection,
    items: Sequence[Delivery | Rejection],
    arrival_ids: list[int],
    outcomes: list[decide.Outcome],
) -> None:
    """Every arrival (the counts they add to events stored before the batch: `update_counts`)."""
    insert_many(
        db,
        rows.ARRIVAL_COLUMNS,
        rows.ARRIVAL_WIDTH,
        [rows.arrival_row(a, it, oc) for a, it, oc in zip(arrival_ids, items, outcomes, strict=True)],
    )
    pairs = zip(arrival_ids, items, strict=True)
    via = [(it.via, a) for a, it in pairs if isinstance(it, Delivery) and it.via]
    if via:  # OPC UA alarm arrivals say how they came (live or refresh); others leave it out
        db.executemany("UPDATE arrivals SET via = ? WHERE arrival_id = ?", via)


def update_counts(
    db: sqlite3.Connection,
    stored: Sequence[decide.EventUpdate],
    pruned: set[int],
    first_at: dict[int, str],
) -> None:
    """What the batch's later arrivals add to the canonical events stored before it (`stored`).

    A conflict, or an arrival earlier than the event's `first_arrival`, updates the event's row
    (rare); the rest only add later arrivals and a last arrival: appended to the tally
    (`agent.store.tally`), which is folded into `events` once it holds `tally.FOLD_ROWS` rows.
    Pruned events (compact key records) are `record_retention_side`'s."""
    updates: list[decide.EventUpdate] = []
    tallied: list[tuple[Any, ...]] = []
    for u in stored:
        cid = u.canonical_id
        if cid in pruned:
            continue
        if u.conflicts or u.first_arrival < first_at[cid]:
            updates.append(u)
        else:
            tallied.append((cid, u.later_arrivals, u.last_arrival))
    if tallied:
        insert_many(db, tally.INSERT_TALLY_HEAD, tally.TALLY_WIDTH, tallied)
        if tally.tally_rows(db) >= tally.FOLD_ROWS:
            tally.fold(db)
    if updates:
        width = rows.UPDATE_EVENT_COUNTS_WIDTH
        one = "(" + ",".join("?" * width) + ")"
        per = PARAMS_PER_INSERT // width
        for start in range(0, len(updates), per):
            chunk = updates[start : start + per]
            db.execute(
                rows.UPDATE_EVENT_COUNTS_HEAD + ",".join([one] * len(chunk)) + rows.UPDATE_EVENT_COUNTS_TAIL,
                [
                    x
                    for u in chunk
                    for x in (u.canonical_id, u.later_arrivals, u.conflicts, u.first_arrival, u.last_arrival)
                ],
            )


def record_retention_side(
    db: sqlite3.Connection,
    outcomes: list[decide.Outcome],
    updates: list[decide.EventUpdate],
    pruned: set[int],
) -> None:
    """Later arrivals of keys whose payload was pruned; the count of key-horizon flags."""
    kept = [u for u in updates if u.canonical_id in pruned]
    if kept:
        db.executemany(
            "UPDATE event_keys SET conflict_count = conflict_count + ?,"
            " first_arrival = min(first_arrival, ?), last_arrival = max(last_arrival, ?)"
            " WHERE canonical_id = ?",
            [(u.conflicts, u.first_arrival, u.last_arrival, u.canonical_id) for u in kept],
        )
    passed = sum(1 for oc in outcomes if decide.KEY_HORIZON_PASSED in oc.flags)
    if passed:
        db.execute(
            "INSERT INTO retention_counts(name, value) VALUES (?, ?)"
            " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            (decide.KEY_HORIZON_PASSED, passed),
        )
        log.warning("key horizon passed: %d new keys may be re-deliveries of forgotten keys", passed)


def insert_pending(
    db: sqlite3.Connection, arrival_ids: list[int], outcomes: list[decide.Outcome]
) -> list[int]:
    """Put identity-incomplete arrivals on the pending list; returns their arrival ids."""
    pending = [
        aid
        for aid, oc in zip(arrival_ids, outcomes, strict=True)
        if oc.decision is Decision.IDENTITY_INCOMPLETE
    ]
    if pending:
        db.executemany("INSERT INTO pending(arrival_id) VALUES (?)", [(a,) for a in pending])
    return pending

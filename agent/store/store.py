"""The event store: one SQLite file (WAL), one writer, decisions made per batch.

Acknowledgement boundaries
--------------------------
1. Source side: a delivery counts as handled once `Store.record()` returned,
   i.e. once the transaction that holds its arrival row (and, for a new key,
   its canonical event, boot record and outbox rows) is committed with
   `synchronous=FULL`. A crash before COMMIT loses the whole batch and nothing
   else; the caller has not acknowledged it (the importer has not printed its
   result lines; a poller re-reads the controller and its ring buffer).
2. Upstream side: an outbox row is marked delivered only after the upstream
   acknowledged it (forwarder). A crash in between sends it again with the
   next attempt number: delivery is at least once, with a stable id, and the
   store deduplicates each event once. It never claims more than that.

How one batch is decided (a handful of SQLite calls, not one per delivery)
--------------------------------------------------------------------------
BEGIN IMMEDIATE; read the highest canonical id; `INSERT ... ON CONFLICT DO
NOTHING` the first delivery of every key (the unique index arbitrates, also
between processes); read back the canonical row of every key; classify in
Python (`decide.classify`); insert every arrival; update counts of touched
canonicals; write boots, pending and outbox rows; COMMIT. An existing key is
never an error, so a conflict never rolls back its arrival.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from agent.core import decide
from agent.core.contract import Anomaly, Decision, Delivery, Key, Rejection
from agent.core.errors import StoreCorrupt, StoreError, StoreFull
from agent.core.jcs import canonical_json
from agent.store.schema import MIGRATIONS, Migration

log = logging.getLogger(__name__)

MIN_SQLITE = (3, 37, 0)  # STRICT tables
_CHUNK = 3000  # keys per VALUES list: 3 parameters each, far below SQLite's 32766


def map_sqlite_error(exc: sqlite3.Error, path: str) -> StoreError:
    """Turn an sqlite3 error into a StoreError that says what and which."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "database or disk is full" in text:
        return StoreFull(
            f"Store {path}: the disk or the store's size quota is full ({text}). "
            "Everything committed before is intact; free space or raise the quota, then run again."
        )
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "not a database" in text:
        return StoreCorrupt(f"Store {path}: the file is damaged or is not an edge-agent store ({text}).")
    if code == sqlite3.SQLITE_CANTOPEN or "unable to open" in text:
        return StoreError(
            f"Store {path}: cannot open the database file ({text}); check the path and permissions."
        )
    if code == sqlite3.SQLITE_READONLY or "readonly" in text:
        return StoreError(f"Store {path}: the database is read-only ({text}); check permissions.")
    if "locked" in text or "busy" in text:
        return StoreError(f"Store {path}: another process holds the write lock for too long ({text}).")
    return StoreError(f"Store {path}: {text}")


def _create_private(path: str) -> None:
    """Create a new store file 0600 (events are plant data): SQLite would make it 0644 minus the
    umask, and its -wal and -shm files copy the database file's mode. An existing file keeps
    its mode (an operator may have chosen 0640 for a reading group)."""
    if path.startswith((":", "file:")) or os.path.exists(path):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass  # another process created it just now
    except OSError:
        pass  # e.g. a missing directory: connect() reports it with the store's own message


class Store:
    """The only writer of identity decisions. Use `await Store.open(path)`; close with `await close()`."""

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self.db = db
        self.path = path
        self._lock = asyncio.Lock()
        self._upstreams: list[str] = []

    # --- lifecycle -----------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        max_bytes: int | None = None,
        busy_timeout_s: float = 30.0,
        check: bool = True,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Store:
        """Open (creating if missing) and migrate the store at `path`."""
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreError(f"SQLite {sqlite3.sqlite_version} is too old; edge-agent needs 3.37 or newer")
        spath = str(path)
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise StoreError(f"synchronous={synchronous!r}: use FULL (default), EXTRA or NORMAL")
        _create_private(spath)
        try:
            db = await aiosqlite.connect(spath, isolation_level=None, timeout=busy_timeout_s)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, spath) from exc
        store = cls(db, spath)
        try:
            await store._configure(synchronous.upper(), max_bytes)
            if check:
                await store._quick_check()
            await store._migrate(migrations)
            store._upstreams = [r[0] for r in await db.execute_fetchall("SELECT name FROM upstreams")]
        except BaseException:
            await db.close()
            raise
        return store

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _configure(self, synchronous: str, max_bytes: int | None) -> None:
        try:
            fresh = await self._scalar("PRAGMA page_count") == 0
            if fresh:
                # Must precede the first table: lets retention give pages back without a full VACUUM.
                await self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            mode = await self._scalar("PRAGMA journal_mode=WAL")
            if str(mode).lower() != "wal":
                raise StoreError(f"Store {self.path}: cannot switch to WAL mode (got {mode})")
            await self.db.execute(f"PRAGMA synchronous={synchronous}")
            await self.db.execute("PRAGMA foreign_keys=ON")
            if max_bytes is not None:
                page = int(await self._scalar("PRAGMA page_size"))
                await self.db.execute(f"PRAGMA max_page_count={max(1, max_bytes // page)}")
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, self.path) from exc

    async def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row of a query."""
        rows = list(await self.db.execute_fetchall(sql, params))
        return rows[0][0]

    async def _quick_check(self) -> None:
        try:
            rows = await self.db.execute_fetchall("PRAGMA quick_check")
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, self.path) from exc
        problems = [r[0] for r in rows if r[0] != "ok"]
        if problems:
            raise StoreCorrupt(f"Store {self.path}: quick_check failed: {'; '.join(problems[:5])}")

    async def _migrate(self, migrations: Sequence[Migration]) -> None:
        version = int(await self._scalar("PRAGMA user_version"))
        for number, title, statements in migrations:
            if number <= version:
                continue
            try:
                await self.db.execute("BEGIN IMMEDIATE")
                for stmt in statements:
                    await self.db.execute(stmt)
                await self.db.execute(f"PRAGMA user_version={int(number)}")
                await self.db.commit()
            except sqlite3.Error as exc:
                await self.db.rollback()
                raise StoreError(f"Store {self.path}: migration {number} ({title}) failed: {exc}") from exc
            log.info("store migrated path=%s version=%d title=%r", self.path, number, title)

    # --- live state of a running service ----------------------------------------------

    async def write_live_state(self, name: str, now: str, state_json: str) -> None:
        """Replace the live state record `name` (written by the service every few seconds)."""
        async with self._lock, self._transaction():
            await self.db.execute(
                "INSERT INTO live_state(name, updated_at, state) VALUES (?,?,?)"
                " ON CONFLICT(name) DO UPDATE SET updated_at = excluded.updated_at, state = excluded.state",
                (name, now, state_json),
            )

    async def read_live_state(self, name: str) -> tuple[str, str] | None:
        """(updated_at, state JSON) of `name`, or None when no service has written it."""
        rows = list(
            await self.db.execute_fetchall("SELECT updated_at, state FROM live_state WHERE name = ?", (name,))
        )
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    # --- upstreams -----------------------------------------------------------

    async def register_upstreams(self, upstreams: Iterable[tuple[str, str]], now: str) -> None:
        """Make the store write outbox rows for these upstreams ((name, backfill) pairs).

        An upstream seen for the first time with backfill `all` gets outbox rows
        for every record already stored; with `none`, only for what comes next.
        """
        async with self._lock, self._transaction():
            known = {r[0] for r in await self.db.execute_fetchall("SELECT name FROM upstreams")}
            for name, backfill in upstreams:
                if name in known:
                    continue
                await self.db.execute(
                    "INSERT INTO upstreams(name, backfill, added_at) VALUES (?,?,?)", (name, backfill, now)
                )
                if backfill == "all":
                    await self._backfill(name, now)
            self._upstreams = [r[0] for r in await self.db.execute_fetchall("SELECT name FROM upstreams")]

    async def _backfill(self, name: str, now: str) -> None:
        for kind, column, table, where in (
            ("transition", "canonical_id", "events", ""),
            ("boot_observed", "boot_row", "boots", ""),
            ("gap", "anomaly_id", "anomalies", "WHERE kind = 'gap'"),
            ("anomaly", "anomaly_id", "anomalies", "WHERE kind <> 'gap'"),
            ("identity_incomplete", "arrival_id", "pending", ""),
        ):
            await self.db.execute(
                f"INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at)"
                f" SELECT ?, ?, {column}, ? FROM {table} {where} ORDER BY {column}",
                (name, kind, now),
            )

    # --- the write path --------------------------------------------------------

    class _Tx:
        def __init__(self, store: Store) -> None:
            self.store = store

        async def __aenter__(self) -> None:
            try:
                await self.store.db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise map_sqlite_error(exc, self.store.path) from exc

        async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
            db = self.store.db
            if et is None:
                try:
                    await db.commit()
                    return
                except sqlite3.Error as err:
                    await _rollback_quietly(db)
                    raise map_sqlite_error(err, self.store.path) from err
            await _rollback_quietly(db)
            if isinstance(exc, sqlite3.Error):
                raise map_sqlite_error(exc, self.store.path) from exc

    def _transaction(self) -> Store._Tx:
        return Store._Tx(self)

    async def record(
        self,
        items: Sequence[Delivery | Rejection],
        *,
        boot_sightings: Sequence[decide.BootSighting] = (),
        anomalies: Sequence[Anomaly] = (),
        now: str | None = None,
    ) -> list[decide.Outcome]:
        """Decide and durably store one batch; returns one Outcome per item, in order.

        `boot_sightings` are boot ids read straight from controllers (pollers);
        boots carried by complete deliveries are found here. `now` stamps outbox
        rows (defaults to the batch's last arrival time).
        """
        stamp = now or (items[-1].arrival_at if items else "")
        async with self._lock, self._transaction():
            return await self._record_tx(items, boot_sightings, anomalies, stamp)

    async def _record_tx(
        self,
        items: Sequence[Delivery | Rejection],
        sightings: Sequence[decide.BootSighting],
        anomalies: Sequence[Anomaly],
        now: str,
    ) -> list[decide.Outcome]:
        db = self.db
        row = list(
            await db.execute_fetchall(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='events'), 0),"
                "           coalesce((SELECT max(canonical_id) FROM events), 0)),"
                " max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='arrivals'), 0),"
                "     coalesce((SELECT max(arrival_id) FROM arrivals), 0)),"
                " EXISTS(SELECT 1 FROM event_keys), EXISTS(SELECT 1 FROM forgotten_keys)"
            )
        )
        max_before, last_arrival_id = int(row[0][0]), int(row[0][1])
        # Read inside BEGIN IMMEDIATE, so a prune by another process cannot slip in between.
        has_key_records, has_forgotten = bool(row[0][2]), bool(row[0][3])
        arrival_ids = [last_arrival_id + 1 + i for i in range(len(items))]

        firsts: dict[Key, Delivery] = {}
        firsts_at: list[int] = []
        for i, item in enumerate(items):
            if isinstance(item, Delivery) and (key := item.key) is not None and key not in firsts:
                firsts[key] = item
                firsts_at.append(i)
        inserted = 0
        if firsts:
            cur = await db.executemany(
                _INSERT_UNLESS_KEY_RECORD if has_key_records else _INSERT_EVENT,
                [
                    _event_row(key, d, arrival_ids[i])
                    for (key, d), i in zip(firsts.items(), firsts_at, strict=True)
                ],
            )
            inserted = cur.rowcount
        if inserted == len(firsts):
            # Every key was new: with AUTOINCREMENT under BEGIN IMMEDIATE (we are the only writer)
            # the ids are the next ones, in insertion order, and the canonical content is our own.
            canonical = {
                key: (max_before + 1 + n, d.payload_hash) for n, (key, d) in enumerate(firsts.items())
            }
            pruned: set[int] = set()
        else:
            canonical, pruned = await self._canonical_of(list(firsts), has_key_records)
        forgotten = await self._forgotten_of(list(firsts)) if has_forgotten and firsts else None
        outcomes, updates = decide.classify(items, canonical, max_before, pruned=pruned, forgotten=forgotten)

        await db.executemany(
            "INSERT INTO arrivals(arrival_id, source, transition_id, boot_id, source_ts, arrival_at,"
            " receiver, payload_hash, decision, canonical_id, reason, flags, line, live, raw)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [_arrival_row(a, it, oc) for a, it, oc in zip(arrival_ids, items, outcomes, strict=True)],
        )
        if updates:
            await db.executemany(
                "UPDATE events SET duplicate_count = duplicate_count + ?,"
                " conflict_count = conflict_count + ?,"
                " status = CASE WHEN conflict_count + ? > 0 THEN 'DuplicateConflict' ELSE status END,"
                " first_arrival = min(first_arrival, ?), last_arrival = max(last_arrival, ?)"
                " WHERE canonical_id = ?",
                [
                    (
                        u.later_arrivals,
                        u.conflicts,
                        u.conflicts,
                        u.first_arrival,
                        u.last_arrival,
                        u.canonical_id,
                    )
                    for u in updates
                    if u.canonical_id not in pruned
                ],
            )
        if pruned or forgotten:
            await self._record_retention_side(outcomes, updates, pruned)
        # Sightings read straight from a controller come first: they carry the real evidence
        # (register or node, previous value, OPC UA StartTime) for a boot the batch also shows.
        boot_rows = await self._record_boots([*sightings, *decide.sightings_of(items)], arrival_ids)
        pending = [
            aid
            for aid, oc in zip(arrival_ids, outcomes, strict=True)
            if oc.decision is Decision.IDENTITY_INCOMPLETE
        ]
        if pending:
            await db.executemany("INSERT INTO pending(arrival_id) VALUES (?)", [(a,) for a in pending])
        anomaly_refs = await self._record_anomalies(anomalies)
        if self._upstreams:
            new_events = [oc.canonical_id for oc in outcomes if oc.decision is Decision.INSERTED]
            refs = [("transition", cid) for cid in new_events if cid is not None]
            refs += [("boot_observed", b) for b in boot_rows]
            refs += anomaly_refs
            refs += [("identity_incomplete", a) for a in pending]
            await db.executemany(
                "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at) VALUES (?,?,?,?)",
                [(up, kind, ref, now) for kind, ref in refs for up in self._upstreams],
            )
        return outcomes

    async def _canonical_of(
        self, keys: list[Key], with_key_records: bool = False
    ) -> tuple[dict[Key, tuple[int, str]], set[int]]:
        """Read back (canonical_id, payload_hash) of every key, one query per chunk.

        With `with_key_records`, keys whose payload was pruned are read from their compact key
        record; their canonical ids are returned as the second value.
        """
        found: dict[Key, tuple[int, str]] = {}
        pruned: set[int] = set()
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            values = ",".join("(?,?,?)" for _ in chunk)
            params = [p for k in chunk for p in (k.source, k.transition_id, k.boot_id)]
            # A CTE joined on the indexed columns uses the unique index; `(a,b,c) IN (VALUES ...)`
            # scans the whole table in SQLite 3.40.
            sql = (
                f"WITH k(s, t, b) AS (VALUES {values}) SELECT e.source, e.transition_id, e.boot_id,"
                " e.canonical_id, e.payload_hash, 0 FROM k JOIN events e"
                " ON e.source = k.s AND e.transition_id = k.t AND e.boot_id = k.b"
            )
            if with_key_records:
                sql += (
                    " UNION ALL SELECT x.source, x.transition_id, x.boot_id, x.canonical_id,"
                    " lower(hex(x.payload_hash)), 1 FROM k JOIN event_keys x"
                    " ON x.source = k.s AND x.transition_id = k.t AND x.boot_id = k.b"
                )
            for r in await self.db.execute_fetchall(sql, params):
                found[Key(r[0], r[1], r[2])] = (int(r[3]), str(r[4]))
                if r[5]:
                    pruned.add(int(r[3]))
        missing = [k for k in keys if k not in found]
        if missing:  # cannot happen inside BEGIN IMMEDIATE unless the schema is broken
            raise StoreError(f"Store {self.path}: canonical rows vanished for {len(missing)} keys")
        return found, pruned

    async def _forgotten_of(self, keys: list[Key]) -> dict[tuple[str, str], str]:
        """(source, bootId) -> latest arrival of a key forgotten at the key horizon, for these keys."""
        pairs = list(dict.fromkeys((k.source, k.boot_id) for k in keys))
        out: dict[tuple[str, str], str] = {}
        for start in range(0, len(pairs), _CHUNK):
            chunk = pairs[start : start + _CHUNK]
            values = ",".join("(?,?)" for _ in chunk)
            rows = await self.db.execute_fetchall(
                f"WITH p(s, b) AS (VALUES {values}) SELECT f.source, f.boot_id, f.through_arrival"
                " FROM p JOIN forgotten_keys f ON f.source = p.s AND f.boot_id = p.b",
                [x for pair in chunk for x in pair],
            )
            out.update({(r[0], r[1]): str(r[2]) for r in rows})
        return out

    async def _record_retention_side(
        self, outcomes: list[decide.Outcome], updates: list[decide.EventUpdate], pruned: set[int]
    ) -> None:
        """Later arrivals of keys whose payload was pruned; the count of key-horizon flags."""
        kept = [u for u in updates if u.canonical_id in pruned]
        if kept:
            await self.db.executemany(
                "UPDATE event_keys SET conflict_count = conflict_count + ?,"
                " first_arrival = min(first_arrival, ?), last_arrival = max(last_arrival, ?)"
                " WHERE canonical_id = ?",
                [(u.conflicts, u.first_arrival, u.last_arrival, u.canonical_id) for u in kept],
            )
        passed = sum(1 for oc in outcomes if decide.KEY_HORIZON_PASSED in oc.flags)
        if passed:
            await self.db.execute(
                "INSERT INTO retention_counts(name, value) VALUES (?, ?)"
                " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (decide.KEY_HORIZON_PASSED, passed),
            )
            log.warning("key horizon passed: %d new keys may be re-deliveries of forgotten keys", passed)

    async def _record_boots(self, sightings: list[decide.BootSighting], arrival_ids: list[int]) -> list[int]:
        if not sightings:
            return []
        pairs = list(dict.fromkeys((s.device, s.boot_id) for s in sightings))
        values = ",".join("(?,?)" for _ in pairs)
        known_rows = await self.db.execute_fetchall(
            f"WITH p(d, b) AS (VALUES {values}) SELECT p.d, p.b FROM p JOIN boots"
            " ON boots.device = p.d AND boots.boot_id = p.b",
            [x for pair in pairs for x in pair],
        )
        known = {(r[0], r[1]) for r in known_rows}
        if len(known) == len(pairs):
            return []
        devices = sorted({d for d, _ in pairs})
        marks = ",".join("?" for _ in devices)
        last = await self.db.execute_fetchall(
            f"SELECT device, last_live_boot FROM device_state WHERE device IN ({marks})", devices
        )
        records, changed = decide.new_boots(sightings, known, {r[0]: r[1] for r in last})
        ids = []
        for rec in records:
            cur = await self.db.execute(
                "INSERT INTO boots(device, boot_id, previous_boot_id, first_arrival, source_ts, live,"
                " arrival_id, evidence) VALUES (?,?,?,?,?,?,?,?)",
                (
                    rec.device,
                    rec.boot_id,
                    rec.previous_boot_id,
                    rec.first_arrival,
                    rec.source_ts,
                    int(rec.live),
                    arrival_ids[rec.index] if rec.index is not None else None,
                    canonical_json(rec.evidence),
                ),
            )
            ids.append(int(cur.lastrowid or 0))
            log.info(
                "BootObserved device=%s boot_id=%s previous=%s live=%s",
                rec.device,
                rec.boot_id,
                rec.previous_boot_id,
                rec.live,
            )
        if changed:
            await self.db.executemany(
                "INSERT INTO device_state(device, last_live_boot) VALUES (?,?)"
                " ON CONFLICT(device) DO UPDATE SET last_live_boot = excluded.last_live_boot",
                list(changed.items()),
            )
        return ids

    async def _record_anomalies(self, anomalies: Sequence[Anomaly]) -> list[tuple[str, int]]:
        refs: list[tuple[str, int]] = []
        for a in anomalies:
            cur = await self.db.execute(
                "INSERT OR IGNORE INTO anomalies(source, boot_id, kind, from_value, to_value, detected_at,"
                " evidence) VALUES (?,?,?,?,?,?,?)",
                (a.source, a.boot_id, a.kind, a.first, a.last, a.detected_at, canonical_json(a.evidence)),
            )
            if cur.rowcount:
                refs.append(("gap" if a.kind == "gap" else "anomaly", int(cur.lastrowid or 0)))
        return refs


_INSERT_EVENT = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id) VALUES (?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT(source, transition_id, boot_id) DO NOTHING"
)
# Once retention has pruned payloads, a key may live on only as a compact key record: the insert
# must not make a second canonical for it (the unique index of `events` no longer sees it).
_INSERT_UNLESS_KEY_RECORD = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id) SELECT ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10"
    " WHERE NOT EXISTS (SELECT 1 FROM event_keys x"
    " WHERE x.source = ?1 AND x.transition_id = ?2 AND x.boot_id = ?3)"
    " ON CONFLICT(source, transition_id, boot_id) DO NOTHING"
)


def _event_row(key: Key, item: Delivery, arrival_id: int) -> tuple[Any, ...]:
    return (
        key.source,
        key.transition_id,
        key.boot_id,
        key.device,
        item.source_timestamp,
        item.payload_json,
        item.payload_hash,
        item.arrival_at,
        item.arrival_at,
        arrival_id,
    )


def _arrival_row(arrival_id: int, item: Delivery | Rejection, oc: decide.Outcome) -> tuple[Any, ...]:
    flags = " ".join(oc.flags)
    if isinstance(item, Rejection):
        return (
            arrival_id,
            None,
            None,
            None,
            None,
            item.arrival_at,
            item.receiver,
            None,
            oc.decision.value,
            None,
            oc.reason,
            flags,
            item.line,
            1,
            item.raw,
        )
    return (
        arrival_id,
        item.source,
        item.transition_id,
        item.boot_id,
        item.source_timestamp,
        item.arrival_at,
        item.receiver,
        item.payload_hash,
        oc.decision.value,
        oc.canonical_id,
        oc.reason,
        flags,
        item.line,
        int(item.live),
        item.raw,
    )


async def _rollback_quietly(db: aiosqlite.Connection) -> None:
    try:
        await db.rollback()
    except sqlite3.Error as exc:  # the connection may already have rolled back (e.g. SQLITE_FULL)
        log.debug("rollback after failure also failed: %s", exc)

"""The event store's writer: one SQLite file (WAL), one writer, decisions made per batch.

The one door for writes (record, live state, upstreams, the outbox); readers use
`agent.store.reader.Reader` on their own connection. Callers never see SQL or the connection.

Acknowledgement boundaries: a delivery is handled once `Store.record()` returned, i.e. its
arrival (and for a new key its canonical event, boot record and outbox rows) is committed with
`synchronous=FULL`; a crash before COMMIT loses the whole batch and nothing else. An outbox row
is delivered only after the upstream acknowledged it: at least once, with a stable id.

One batch is one call on the connection's thread, BEGIN IMMEDIATE to COMMIT: look up the keys,
classify in Python (`decide.classify`), insert with the unique index arbitrating, write the
rest. An existing key is never an error, so a conflict never rolls back its arrival. The
boundaries and the batch's statements in full: docs/architecture.md, "The store's writer".
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import aiosqlite

from agent.core import decide
from agent.core.alarms import AlarmMemory
from agent.core.contract import Anomaly, Delivery, Rejection
from agent.core.errors import StoreError
from agent.core.review_mark import Mark
from agent.core.snapshot import Positions
from agent.store import live_file
from agent.store.alarm_memory import alarm_memory
from agent.store.batch import record_batch
from agent.store.connection import WriterConnection, WriteTransaction, open_writer, read_store_id
from agent.store.outbox import Outbox
from agent.store.positions import record_positions
from agent.store.review import mark as review_mark
from agent.store.schema import MIGRATIONS, TALLY_MIGRATION, Migration
from agent.store.tally import fold_async, tally_waiting

log = logging.getLogger(__name__)

_BACKFILL = (
    ("transition", "canonical_id", "events", ""),
    ("boot_observed", "boot_row", "boots", ""),
    ("gap", "anomaly_id", "anomalies", "WHERE kind = 'gap'"),
    ("anomaly", "anomaly_id", "anomalies", "WHERE kind <> 'gap'"),
    ("identity_incomplete", "arrival_id", "pending", ""),
)


class Store:
    """The only writer of identity decisions. Use `await Store.open(path)`; close with `await close()`.

    `outbox` claims, settles, counts and requeues outbox rows on this store; `store_id` is the
    UUID made with the store file (a replaced or salvaged store has a new one).
    """

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self.db = db
        self.path = path
        self._writer = WriterConnection(db, path)
        self._lock = self._writer.lock
        self._upstreams: list[str] = []
        self.outbox = Outbox(self._writer)
        self.store_id = ""  # the UUID made with the store (contract section 4); set by `open`
        self._live_file: Path | None = None  # where the live state goes instead of the store
        self._tally = True  # the schema has the event tally (a store opened at an older version has not)

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
        spath = str(path)
        db = await open_writer(
            spath,
            synchronous=synchronous,
            max_bytes=max_bytes,
            busy_timeout_s=busy_timeout_s,
            check=check,
            migrations=migrations,
        )
        store = cls(db, spath)
        store._tally = TALLY_MIGRATION in migrations
        try:
            store._upstreams = await store._upstream_names()
            store.store_id = await read_store_id(db)
        except BaseException:
            await db.close()
            raise
        return store

    async def close(self) -> None:
        """Fold the event tally into the events' counts (agent.store.tally), then close. A fold
        that fails (a full disk) leaves the tally as it is: every reader counts it in."""
        try:
            if self._tally and await tally_waiting(self.db):  # the write lock only when there is one
                async with self._lock, self._transaction():
                    await fold_async(self.db)
        except (StoreError, sqlite3.Error, ValueError) as exc:
            log.warning("store %s: the event tally stays unfolded: %s", self.path, exc)
        finally:
            await self.db.close()

    async def set_quota(self, max_bytes: int | None) -> None:
        """Let the database grow to `max_bytes` from now on (this connection; None: no quota).

        The service opens its reserve this way when the quota is reached at SIGTERM."""
        async with self._lock:
            rows = list(await self.db.execute_fetchall("PRAGMA page_size"))
            pages = 4294967294 if max_bytes is None else max(1, max_bytes // int(rows[0][0]))
            await self.db.execute(f"PRAGMA max_page_count={int(pages)}")

    async def set_page_cache(self, kib: int) -> None:
        """SQLite's page cache of the writer's connection, in KiB (SQLite's default is 2,000 KiB).

        The pages stay in memory up to this size for as long as the connection is open: `import`
        raises it for the file's duration (see `agent.cli.records.IMPORT_PAGE_CACHE_KIB`)."""
        async with self._lock:
            await self.db.execute(f"PRAGMA cache_size=-{int(kib)}")

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _transaction(self) -> WriteTransaction:
        """BEGIN IMMEDIATE ... COMMIT on the writer's connection; hold `_lock` around it."""
        return self._writer.transaction()

    async def _upstream_names(self) -> list[str]:
        return [r[0] for r in await self.db.execute_fetchall("SELECT name FROM upstreams")]

    # --- live state of a running service ----------------------------------------------

    @property
    def commits(self) -> int:
        """Write transactions committed since the store was opened."""
        return self._writer.commits

    async def use_live_file(self, path: Path | None) -> None:
        """Keep the live state in `path` (a file in memory, `agent.store.live_file`) from now on,
        named in the store for `status`; None: in the store's `live_state` table. Once, at start."""
        async with self._lock, self._transaction():
            if path is None:
                await self.db.execute("DELETE FROM store_meta WHERE name = ?", (live_file.META_KEY,))
            else:
                await self.db.execute(
                    "INSERT INTO store_meta(name, value) VALUES (?, ?)"
                    " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    (live_file.META_KEY, str(path)),
                )
                await self.db.execute("DELETE FROM live_state")  # no stale row beside the file
        self._live_file = path

    async def write_live_state(self, name: str, now: str, state_json: str) -> None:
        """Replace the live state record `name` (written by the service every few seconds): in its
        file in memory when there is one (no flash write), else in the store."""
        if self._live_file is not None and name == "service":
            try:
                await asyncio.to_thread(live_file.write, self._live_file, now, state_json)
                return
            except OSError as exc:  # `status` would see a stale file: back to the store, said once
                log.warning(
                    "live state file %s cannot be written (%s): keeping it in the store", self._live_file, exc
                )
                await self.use_live_file(None)
        async with self._lock, self._transaction():
            await self.db.execute(
                "INSERT INTO live_state(name, updated_at, state) VALUES (?,?,?)"
                " ON CONFLICT(name) DO UPDATE SET updated_at = excluded.updated_at, state = excluded.state",
                (name, now, state_json),
            )

    async def read_live_state(self, name: str) -> tuple[str, str] | None:
        """(updated_at, state JSON) of `name`, or None when no service has written it."""
        async with self._lock:
            found = list(
                await self.db.execute_fetchall(
                    "SELECT updated_at, state FROM live_state WHERE name = ?", (name,)
                )
            )
        return (str(found[0][0]), str(found[0][1])) if found else None

    async def read_alarm_memory(self, device: str) -> AlarmMemory:
        """What the store holds of `device`'s OPC UA alarms (agent.store.alarm_memory)."""
        async with self._lock:
            return await alarm_memory(self.db, device)

    # --- review marks ---------------------------------------------------------------

    async def mark_reviewed(self, arrival_id: int, note: str, at: str, by: str | None) -> Mark:
        """Keep an operator's note that a conflict or identity-incomplete arrival was reviewed.
        Adds a mark; changes and deletes nothing. NotReviewable for any other arrival id."""
        async with self._lock, self._transaction():
            return await review_mark(self.db, arrival_id, note, at, by)

    # --- upstreams -----------------------------------------------------------

    async def register_upstreams(self, upstreams: Iterable[tuple[str, str]], now: str) -> None:
        """Make the store write outbox rows for these upstreams ((name, backfill) pairs).

        An upstream seen for the first time with backfill `all` gets outbox rows
        for every record already stored; with `none`, only for what comes next.
        """
        async with self._lock, self._transaction():
            known = set(await self._upstream_names())
            for name, backfill in upstreams:
                if name in known:
                    continue
                await self.db.execute(
                    "INSERT INTO upstreams(name, backfill, added_at) VALUES (?,?,?)", (name, backfill, now)
                )
                if backfill == "all":
                    await self._backfill(name, now)
            self._upstreams = await self._upstream_names()

    async def _backfill(self, name: str, now: str) -> None:
        for kind, column, table, where in _BACKFILL:
            await self.db.execute(
                f"INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at)"
                f" SELECT ?, ?, {column}, ? FROM {table} {where} ORDER BY {column}",
                (name, kind, now),
            )

    # --- the write path --------------------------------------------------------

    async def record(
        self,
        items: Sequence[Delivery | Rejection],
        *,
        boot_sightings: Sequence[decide.BootSighting] = (),
        anomalies: Sequence[Anomaly] = (),
        positions: Sequence[Positions] = (),
        now: str | None = None,
    ) -> list[decide.Outcome]:
        """Decide and durably store one batch; returns one Outcome per item, in order.

        `boot_sightings` are boot ids read straight from controllers (pollers);
        boots carried by complete deliveries are found here. `now` stamps outbox
        rows (defaults to the batch's last arrival time). `positions` (pollers) are where each
        tracker stands after the reads of this batch: recorded in the same transaction.
        """
        stamp = now or (items[-1].arrival_at if items else "")
        upstreams = self._upstreams
        reserving = self.outbox.reserving
        reserved: dict[str, int] = {}

        def record(conn: sqlite3.Connection) -> list[decide.Outcome]:
            reserved.clear()  # (a retried transaction starts again)
            outcomes = record_batch(
                conn,
                self.path,
                items,
                boot_sightings,
                anomalies,
                stamp,
                upstreams,
                reserving=reserving,
                reserved=reserved,
            )
            record_positions(conn, positions)
            return outcomes

        # The whole transaction in one trip to the connection's thread, not one per statement.
        async with self._lock:
            outcomes = await self._writer.transact(record)
            self.outbox.note_reserved(reserved)  # committed: their first attempt is counted
            return outcomes

"""Opening the store's SQLite file: the writer's connection (configured, checked, migrated) and
a reader's read-only one, the write transaction, and sqlite3 errors turned into StoreErrors.

Nothing here decides anything about events; nothing outside `agent.store` uses this module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiosqlite

from agent.core.errors import StoreCorrupt, StoreError, StoreFull
from agent.store.schema import MIGRATIONS, Migration

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_SQLITE = (3, 37, 0)  # STRICT tables
# The page size of a new store. A store made with another keeps it (changing it needs a VACUUM
# outside WAL mode, a second copy of the file); measured in docs/performance.md, "Flash".
PAGE_SIZE = 1024
WAL_CHECKPOINT_BYTES = 4 * 1024 * 1024  # SQLite's default of 1,000 pages of 4 KiB, in bytes


class StoreMissing(StoreError):
    """A command that only reads (or only changes an existing store) was pointed at no store."""


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


def require_existing(path: str | Path) -> str:
    """`path` as text, or StoreMissing (naming it) when no store file is there."""
    spath = str(path)
    if not os.path.exists(spath):
        raise StoreMissing(f"Store {spath}: no such file (nothing was created)")
    return spath


def _check_sqlite_version() -> None:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(f"SQLite {sqlite3.sqlite_version} is too old; edge-agent needs 3.37 or newer")


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


async def scalar(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of a query."""
    rows = list(await db.execute_fetchall(sql, params))
    return rows[0][0]


async def open_writer(
    path: str,
    *,
    synchronous: str,
    max_bytes: int | None,
    busy_timeout_s: float,
    check: bool,
    migrations: Sequence[Migration],
) -> aiosqlite.Connection:
    """The writer's connection to `path` (created 0600 if missing): WAL, checked, migrated."""
    _check_sqlite_version()
    if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
        raise StoreError(f"synchronous={synchronous!r}: use FULL (default), EXTRA or NORMAL")
    _create_private(path)
    try:
        db = await aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_s)
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, path) from exc
    try:
        await _configure(db, path, synchronous.upper(), max_bytes, busy_timeout_s)
        if check:
            await _quick_check(db, path)
        await _migrate(db, path, migrations)
    except BaseException:
        await db.close()
        raise
    return db


def newer_store(path: str, version: int, latest: int) -> StoreError:
    """A store a newer edge-agent migrated: this one never opens it (a downgrade is refused), and says
    the two ways back."""
    return StoreError(
        f"Store {path}: schema version {version} is newer than this edge-agent knows ({latest}): a newer "
        "edge-agent migrated it, and an older one does not open it (it would misread what it does not "
        "know). The way back: run the newer version again (install.sh --rollback goes forward again), "
        "or put back the copy of the store made before the upgrade (install.sh --rollback "
        "--restore-backup; docs/install.md)."
    )


async def open_reader(path: str | Path, busy_timeout_s: float = 30.0) -> aiosqlite.Connection:
    """A read-only connection (`mode=ro`) to an existing store at the current schema version.

    It can never create, migrate or write the store; StoreMissing when there is no file.
    """
    _check_sqlite_version()
    spath = require_existing(path)
    uri = "file:" + quote(os.path.abspath(spath)) + "?mode=ro"
    try:
        db = await aiosqlite.connect(uri, uri=True, isolation_level=None, timeout=busy_timeout_s)
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, spath) from exc
    try:
        version = int(await scalar(db, "PRAGMA user_version"))
    except sqlite3.Error as exc:
        await db.close()
        raise map_sqlite_error(exc, spath) from exc
    latest = MIGRATIONS[-1][0]
    if version > latest:
        await db.close()
        raise newer_store(spath, version, latest)
    if version < latest:
        await db.close()
        what = "is not an edge-agent store" if version == 0 else f"has schema version {version}"
        raise StoreError(
            f"Store {spath}: {what} (this edge-agent reads version {latest}); a read-only command "
            "never migrates: run `edge-agent run` or an import against it first."
        )
    return db


async def _configure(
    db: aiosqlite.Connection, path: str, synchronous: str, max_bytes: int | None, busy_timeout_s: float
) -> None:
    try:
        if await scalar(db, "PRAGMA page_count") == 0:
            # Both must precede the first table. Small pages: every page a commit touches is one
            # WAL frame and one checkpoint write, so a commit of a few small rows into eight
            # b-trees writes a quarter of what 4 KiB pages cost (docs/performance.md, "Flash").
            await db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            # Lets retention give pages back without a full VACUUM.
            await db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = await _switch_to_wal(db, busy_timeout_s)
        if str(mode).lower() != "wal":
            raise StoreError(f"Store {path}: cannot switch to WAL mode (got {mode})")
        await db.execute(f"PRAGMA synchronous={synchronous}")
        # A checkpoint once the WAL holds WAL_CHECKPOINT_BYTES, whatever the page size (SQLite's
        # default is 1,000 pages: 4 MB of 4 KiB pages, a quarter of that of 1 KiB ones, which
        # would write the same hot pages back four times as often).
        page = int(await scalar(db, "PRAGMA page_size"))
        await db.execute(f"PRAGMA wal_autocheckpoint={max(1, WAL_CHECKPOINT_BYTES // page)}")
        await db.execute("PRAGMA foreign_keys=ON")
        if max_bytes is not None:
            await db.execute(f"PRAGMA max_page_count={max(1, max_bytes // page)}")
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, path) from exc


async def _switch_to_wal(db: aiosqlite.Connection, busy_timeout_s: float) -> Any:
    """`PRAGMA journal_mode=WAL`, retried while another process switches the same fresh file
    (SQLite reports that as `database is locked` at once, without waiting for the busy timeout)."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            return await scalar(db, "PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.01)


async def _quick_check(db: aiosqlite.Connection, path: str) -> None:
    try:
        rows = await db.execute_fetchall("PRAGMA quick_check")
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, path) from exc
    problems = [r[0] for r in rows if r[0] != "ok"]
    if problems:
        raise StoreCorrupt(f"Store {path}: quick_check failed: {'; '.join(problems[:5])}")


async def _migrate(db: aiosqlite.Connection, path: str, migrations: Sequence[Migration]) -> None:
    """Apply the missing migrations, each in its own transaction. The version is read under the
    write lock (BEGIN IMMEDIATE), so two processes opening one fresh store never both migrate."""
    while (step := await _next_migration(db, path, migrations)) is not None:
        number, title, statements = step
        try:
            for stmt in statements:
                await db.execute(stmt)
            await db.execute(f"PRAGMA user_version={int(number)}")
            await db.commit()
        except sqlite3.Error as exc:
            await rollback_quietly(db)
            raise StoreError(f"Store {path}: migration {number} ({title}) failed: {exc}") from exc
        log.info("store migrated path=%s version=%d title=%r", path, number, title)


async def _next_migration(
    db: aiosqlite.Connection, path: str, migrations: Sequence[Migration]
) -> Migration | None:
    """BEGIN IMMEDIATE and the first migration above the stored version (the transaction stays
    open for it), or None (committed: nothing to do)."""
    try:
        await db.execute("BEGIN IMMEDIATE")
        version = int(await scalar(db, "PRAGMA user_version"))
    except sqlite3.Error as exc:
        await rollback_quietly(db)
        raise map_sqlite_error(exc, path) from exc
    latest = max((m[0] for m in migrations), default=0)
    if version > latest:
        await rollback_quietly(db)
        raise newer_store(path, version, latest)
    todo = [m for m in migrations if m[0] > version]
    if todo:
        return todo[0]
    await db.commit()
    return None


async def read_store_id(db: aiosqlite.Connection) -> str:
    """The UUID made with the store (`store_meta`), or "" for a store older than its migration."""
    try:
        rows = list(await db.execute_fetchall("SELECT value FROM store_meta WHERE name = 'store_id'"))
    except sqlite3.OperationalError:  # no store_meta table: a store at an older schema version
        return ""
    return str(rows[0][0]) if rows else ""


class WriteTransaction:
    """`async with WriteTransaction(db, path):` BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error.

    sqlite3 errors leave as StoreErrors. The caller holds the store's lock around it.
    """

    def __init__(self, db: aiosqlite.Connection, path: str, counts: list[int] | None = None) -> None:
        self.db = db
        self.path = path
        self._counts = counts  # [commits]: one added per COMMIT that succeeded

    async def __aenter__(self) -> None:
        try:
            await self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, self.path) from exc

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if et is None:
            try:
                await self.db.commit()
                if self._counts is not None:
                    self._counts[0] += 1
                return
            except sqlite3.Error as err:
                await rollback_quietly(self.db)
                raise map_sqlite_error(err, self.path) from err
        await rollback_quietly(self.db)
        if isinstance(exc, sqlite3.Error):
            raise map_sqlite_error(exc, self.path) from exc


async def rollback_quietly(db: aiosqlite.Connection) -> None:
    try:
        await db.rollback()
    except sqlite3.Error as exc:  # the connection may already have rolled back (e.g. SQLITE_FULL)
        log.debug("rollback after failure also failed: %s", exc)


async def on_thread(db: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`fn(connection)` run on the connection's own thread, in one trip (aiosqlite runs each
    statement as one trip there: a queue put, a future and a wake-up of the event loop each).

    Uses aiosqlite's queue of calls (`_execute`) and its sqlite3 connection (`_conn`), which it
    has no public name for (pinned to 0.22 in pyproject). Calls queued before run first; nothing
    else runs on the connection while `fn` does."""
    run: Callable[[Callable[[], T]], Awaitable[T]] = db._execute
    return await run(lambda: fn(db._conn))


def _transact(conn: sqlite3.Connection, path: str, fn: Callable[[sqlite3.Connection], T]) -> T:
    """BEGIN IMMEDIATE, `fn(conn)`, COMMIT; ROLLBACK when `fn` or COMMIT fails. Runs on the
    connection's thread; what `WriteTransaction` does, in one call. sqlite3 errors leave as
    StoreErrors, other exceptions as they are (after the rollback)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, path) from exc
    try:
        result = fn(conn)
    except BaseException as exc:
        _rollback_quietly(conn)
        if isinstance(exc, sqlite3.Error):
            raise map_sqlite_error(exc, path) from exc
        raise
    try:
        conn.commit()
    except sqlite3.Error as err:
        _rollback_quietly(conn)
        raise map_sqlite_error(err, path) from err
    return result


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.rollback()
    except sqlite3.Error as exc:  # the connection may already have rolled back (e.g. SQLITE_FULL)
        log.debug("rollback after failure also failed: %s", exc)


class WriterConnection:
    """The writer's connection, its lock and its transactions: what the store's writing parts share.

    Hold `lock` around every use of `db`; `transaction()` is BEGIN IMMEDIATE ... COMMIT inside it.
    """

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self.db = db
        self.path = path
        self.lock = asyncio.Lock()
        self._counts = [0]

    @property
    def commits(self) -> int:
        """Write transactions committed on this connection since it was opened (each writes its
        pages to the WAL: what the flash pays per commit, docs/performance.md "Flash")."""
        return self._counts[0]

    def transaction(self) -> WriteTransaction:
        return WriteTransaction(self.db, self.path, self._counts)

    async def transact(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """BEGIN IMMEDIATE, `fn(connection)`, COMMIT (ROLLBACK on error), all of it in one trip to
        the connection's thread (`on_thread`); the semantics and errors of `transaction()`.

        Hold `lock` around it. When the awaiting task is cancelled, the transaction still runs
        to its end on the thread (committed or rolled back), as a COMMIT already queued would:
        cancelled means "not known to be recorded", never "known not recorded"."""
        result = await on_thread(self.db, lambda conn: _transact(conn, self.path, fn))
        self._counts[0] += 1
        return result

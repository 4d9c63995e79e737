"""Reading what can still be read from a damaged store file (synchronous `sqlite3`; the salvage
calls it from a worker thread, one call at a time).

A damaged page makes every query that touches it fail, but SQLite's answers never come from
a page it could not read (it reports SQLITE_CORRUPT instead), so what a query does return is
what the file holds. Rows are read by rowid, in ranges; a range that fails is read again one
rowid at a time, so one bad page costs the rows on it and nothing else. Indexes are never
used (a damaged index must not hide a readable row). A rowid whose lookup fails is counted
as unreadable: it may have held a row or not, and the count says so ("rows that could not be
read"), never a guess of what they were. When even a table's last rowid cannot be read, a
scan stops after 4 ranges (2,000 rowids) without a readable row, so the count covers only
those.

A file that does not open as it is (a damaged 100-byte header; some truncated files) is read
through a copy with a rebuilt header, the page size found by trying the usual sizes until the
schema reads. The copy lives next to the file for the time of the salvage and then goes.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

CHUNK = 500
MAGIC = b"SQLite format 3\x00"
PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)
UNKNOWN_END_EMPTY_CHUNKS = 4  # with no known last rowid: stop after this many ranges without a row

OUTBOX_COLUMNS = "upstream, kind, ref_id, attempts, last_error, created_at"
EVENT_COLUMNS = "source, transition_id, boot_id, source_ts, payload, payload_hash, first_arrival"
BASIS_COLUMN = "identity_basis"  # added by a later migration: 'counter' in a store made before it
BOOT_COLUMNS = "device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence"
ANOMALY_COLUMNS = "source, boot_id, kind, from_value, to_value, detected_at, evidence"
ARRIVAL_COLUMNS = "source, transition_id, boot_id, source_ts, arrival_at, receiver, raw, line"

Rows = dict[int, tuple[Any, ...]]


class DamagedStore:
    """One damaged store file, open for reading (`con` is None when nothing could be opened)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problem: str | None = None  # why nothing (or less than usual) could be opened
        self.unreadable: dict[str, int] = {}  # table -> rowids whose lookup failed
        self._tmp: str | None = None
        self.con = self._open()
        self.event_columns = f"{EVENT_COLUMNS}, {self._basis_column('events')}"
        self.arrival_columns = f"{ARRIVAL_COLUMNS}, {self._basis_column('arrivals')}"

    def _basis_column(self, table: str) -> str:
        """`identity_basis` when the damaged store's table has it, else the value it implies."""
        if self.con is None:
            return "'counter'"
        try:
            self.con.execute(f"SELECT {BASIS_COLUMN} FROM {table} LIMIT 0")
        except sqlite3.Error:
            return "'counter'"
        return f"coalesce({BASIS_COLUMN}, 'counter')"

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def lost(self, table: str, n: int = 1) -> None:
        self.unreadable[table] = self.unreadable.get(table, 0) + n

    # --- reading ------------------------------------------------------------------------

    def scan(self, table: str, columns: str, where: str = "") -> Rows:
        """Every readable row of a small table (matching `where`), by rowid."""
        found: Rows = {}
        for lo, hi in self.ranges(table, CHUNK):
            found.update(self.scan_range(table, columns, lo, hi, where))
        return found

    def ranges(self, table: str, step: int) -> Iterable[tuple[int, int]]:
        """(lo, hi] rowid ranges covering `table`; without a known end, until a few come back empty."""
        last = self._last_rowid(table)
        lo, empty = 0, 0
        while (last is not None and lo < last) or (last is None and empty < UNKNOWN_END_EMPTY_CHUNKS):
            hi = lo + step
            yield lo, hi
            if last is None:
                empty = empty + 1 if not self._any_in(table, lo, hi) else 0
            lo = hi

    def scan_range(self, table: str, columns: str, lo: int, hi: int, where: str = "") -> Rows:
        """The readable rows with lo < rowid <= hi (matching `where`); failures are counted."""
        if self.con is None:
            return {}
        cond = f" AND ({where})" if where else ""
        found: Rows = {}
        for start in range(lo, hi, CHUNK):
            end = min(hi, start + CHUNK)
            sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? AND rowid <= ?{cond}"
            try:
                rows = self.con.execute(sql, (start, end)).fetchall()
            except sqlite3.Error:
                rows = self._one_by_one(table, columns, range(start + 1, end + 1), cond)
            found.update((int(r[0]), tuple(r[1:])) for r in rows)
        return found

    def lookup(self, table: str, columns: str, ids: Iterable[int]) -> Rows:
        """The rows with these rowids; an id that fails is counted, one that is absent is not."""
        if self.con is None:
            return {}
        found: Rows = {}
        ordered = sorted(set(ids))
        for start in range(0, len(ordered), CHUNK):
            chunk = ordered[start : start + CHUNK]
            marks = ",".join("?" for _ in chunk)
            try:
                sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid IN ({marks})"
                rows = self.con.execute(sql, chunk).fetchall()
            except sqlite3.Error:
                rows = self._one_by_one(table, columns, chunk, "")
            found.update((int(r[0]), tuple(r[1:])) for r in rows)
        return found

    def whole_table(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        """Every row of a small table without rowids (the tracker positions): all of it, or none
        and the table counted as one unreadable row when it cannot be read. A store made before
        the table existed has none."""
        if self.con is None:
            return []
        try:
            found = self.con.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            )
            if found.fetchone() is None:
                return []
            return [tuple(r) for r in self.con.execute(f"SELECT {columns} FROM {table}").fetchall()]
        except sqlite3.Error:
            self.lost(table)
            return []

    def latest_events(self, step: int = 2000) -> Rows:
        """The readable canonical event with the highest id per (source, bootId): the last
        transition the store recorded for each, whether delivered or not (tracker state)."""
        best: dict[tuple[str, str], int] = {}
        for lo, hi in self.ranges("events", step):
            for cid, (source, _tid, boot) in self.scan_range(
                "events", "source, transition_id, boot_id", lo, hi
            ).items():
                if cid > best.get((source, boot), 0):
                    best[(source, boot)] = cid
        return self.lookup("events", self.event_columns, best.values())

    def _one_by_one(self, table: str, columns: str, ids: Iterable[int], cond: str) -> list[Any]:
        assert self.con is not None
        rows: list[Any] = []
        sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid = ?{cond}"
        for rowid in ids:
            try:
                rows += self.con.execute(sql, (rowid,)).fetchall()
            except sqlite3.Error:
                self.lost(table)
        return rows

    def _any_in(self, table: str, lo: int, hi: int) -> bool:
        assert self.con is not None
        try:
            sql = f"SELECT 1 FROM {table} WHERE rowid > ? AND rowid <= ? LIMIT 1"
            return self.con.execute(sql, (lo, hi)).fetchone() is not None
        except sqlite3.Error:
            return False

    def _last_rowid(self, table: str) -> int | None:
        if self.con is None:
            return 0
        for sql in (f"SELECT max(rowid) FROM {table}", "SELECT seq FROM sqlite_sequence WHERE name = ?"):
            try:
                row = self.con.execute(sql, (table,) if "?" in sql else ()).fetchone()
            except sqlite3.Error:
                continue
            if row is not None and row[0] is not None:
                return int(row[0])
        return None

    # --- opening ------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection | None:
        """A connection on which the schema reads: the file itself, or a copy with a rebuilt header."""
        con = _try_open(self.path)
        if con is not None:
            return con
        self._tmp = tempfile.mkdtemp(prefix=".salvage-", dir=os.path.dirname(os.path.abspath(self.path)))
        for size in PAGE_SIZES:
            copy = os.path.join(self._tmp, f"header-{size}.db")
            if not _copy_with_header(self.path, copy, size):
                break
            con = _try_open(copy)
            if con is not None:
                self.problem = (
                    "the file did not open as it was; "
                    f"read through a copy with a rebuilt header (page size {size})"
                )
                return con
            os.unlink(copy)
        self.problem = "not readable as an SQLite database, not even with a rebuilt header"
        return None


def _try_open(path: str) -> sqlite3.Connection | None:
    try:
        con = sqlite3.connect(path, isolation_level=None, timeout=1.0, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        con.execute("PRAGMA cell_size_check=ON")
        con.execute("PRAGMA query_only=ON")
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        con.close()
        return None
    if "outbox" not in names:
        con.close()
        return None
    return con


def _copy_with_header(src: str, dst: str, page_size: int) -> bool:
    """Copy `src` to `dst` with a standard header for `page_size` (False if `src` cannot be read).

    Only the fields a reader needs are set: the magic text, the page size, read/write versions
    1 (the copy has no WAL), payload fractions, schema format 4 and UTF-8. The change counter
    and the page count are left at 0 so SQLite takes the file's real size.
    """
    try:
        shutil.copyfile(src, dst)
        with open(dst, "r+b") as f:
            header = bytearray(f.read(100).ljust(100, b"\x00"))
            header[0:16] = MAGIC
            header[16:18] = (page_size if page_size < 65536 else 1).to_bytes(2, "big")
            header[18:24] = bytes([1, 1, 0, 64, 32, 32])
            header[24:32] = bytes(8)  # change counter, page count: "use the file's size"
            header[44:48] = (4).to_bytes(4, "big")
            header[56:60] = (1).to_bytes(4, "big")
            header[92:100] = bytes(8)
            f.seek(0)
            f.write(bytes(header))
    except OSError:
        return False
    return True

"""Reading what can still be read from a damaged store file (synchronous `sqlite3`, run in a
thread by `agent.store.salvage`).

A damaged page makes every query that touches it fail, but SQLite's answers never come from
a page it could not read (it reports SQLITE_CORRUPT instead), so what a query does return is
what the file holds. Rows are read by rowid, in chunks; a chunk that fails is read again one
rowid at a time, so one bad page costs the rows on it and nothing else. Indexes are never
used (a damaged index must not hide a readable row). A rowid whose lookup fails is counted
as unreadable: it may have held a row or not, and the count says so ("rows that could not be
read"), never a guess of what they were. When even a table's last rowid cannot be read, the
scan stops after 4 chunks (2,000 rowids) without a readable row, so the count covers only
those.

A file that does not open as it is (a damaged 100-byte header; some truncated files) is read
through a copy with a rebuilt header, the page size found by trying the usual sizes until the
schema reads. The copy lives next to the file for the time of the salvage and then goes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

CHUNK = 500
MAGIC = b"SQLite format 3\x00"
PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)
UNKNOWN_END_EMPTY_CHUNKS = 4  # with no known last rowid: stop after this many chunks without a row

OUTBOX_COLUMNS = "upstream, kind, ref_id, attempts, last_error, created_at"
EVENT_COLUMNS = "source, transition_id, boot_id, source_ts, payload, payload_hash, first_arrival"
BOOT_COLUMNS = "device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence"
ANOMALY_COLUMNS = "source, boot_id, kind, from_value, to_value, detected_at, evidence"
ARRIVAL_COLUMNS = "source, transition_id, boot_id, source_ts, arrival_at, receiver, raw, line"


@dataclass
class OldStore:
    """What could be read. Rows are keyed by their rowid in the old file."""

    upstreams: list[tuple[Any, ...]] = field(default_factory=list)
    device_state: list[tuple[Any, ...]] = field(default_factory=list)
    boots: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    outbox: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # pending rows only
    events: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    anomalies: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    arrivals: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)  # table -> rowids that failed
    problem: str | None = None  # why nothing (or less than usual) could be opened

    def lost(self, table: str, n: int = 1) -> None:
        self.unreadable[table] = self.unreadable.get(table, 0) + n


def read_old_store(path: str) -> OldStore:
    """Everything salvage needs from the damaged store at `path`; never raises for damage."""
    out = OldStore()
    with _readable(path, out) as con:
        if con is None:
            return out
        out.upstreams = list(_scan(con, out, "upstreams", "name, backfill, added_at").values())
        out.device_state = list(_scan(con, out, "device_state", "device, last_live_boot").values())
        out.boots = _scan(con, out, "boots", BOOT_COLUMNS)
        out.outbox = _scan(con, out, "outbox", OUTBOX_COLUMNS, "state = 'pending'")
        refs: dict[str, set[int]] = {}
        for _upstream, kind, ref_id, *_ in out.outbox.values():
            refs.setdefault(str(kind), set()).add(int(ref_id))
        out.events = _lookup(con, out, "events", EVENT_COLUMNS, refs.get("transition", set()))
        wanted = refs.get("gap", set()) | refs.get("anomaly", set())
        out.anomalies = _lookup(con, out, "anomalies", ANOMALY_COLUMNS, wanted)
        out.arrivals = _lookup(con, out, "arrivals", ARRIVAL_COLUMNS, refs.get("identity_incomplete", set()))
        missing = set(refs.get("boot_observed", set())) - set(out.boots)
        out.boots.update(_lookup(con, out, "boots", BOOT_COLUMNS, missing))
    return out


@contextlib.contextmanager
def _readable(path: str, out: OldStore) -> Iterator[sqlite3.Connection | None]:
    """A connection on which the schema reads: the file itself, or a copy with a rebuilt header."""
    con = _try_open(path)
    if con is not None:
        try:
            yield con
        finally:
            con.close()
        return
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(path))) as tmp:
        for size in PAGE_SIZES:
            copy = os.path.join(tmp, f"header-{size}.db")
            if not _copy_with_header(path, copy, size):
                break
            con = _try_open(copy)
            if con is not None:
                out.problem = (
                    "the file did not open as it was; "
                    f"read through a copy with a rebuilt header (page size {size})"
                )
                try:
                    yield con
                finally:
                    con.close()
                return
        out.problem = "not readable as an SQLite database, not even with a rebuilt header"
        yield None


def _try_open(path: str) -> sqlite3.Connection | None:
    try:
        con = sqlite3.connect(path, isolation_level=None, timeout=1.0)
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

    Only the fields a reader needs are set: the magic text, the page size, WAL read/write
    versions 1 (the copy has no WAL), payload fractions, schema format 4, UTF-8, and
    incremental auto-vacuum (what edge-agent stores use). The change counter and the page
    count are left at 0 so SQLite takes the file's real size.
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


def _last_rowid(con: sqlite3.Connection, table: str) -> int | None:
    for sql in (f"SELECT max(rowid) FROM {table}", "SELECT seq FROM sqlite_sequence WHERE name = ?"):
        try:
            row = con.execute(sql, (table,) if "?" in sql else ()).fetchone()
        except sqlite3.Error:
            continue
        if row is not None and row[0] is not None:
            return int(row[0])
    return None


def _scan(
    con: sqlite3.Connection, out: OldStore, table: str, columns: str, where: str = ""
) -> dict[int, tuple[Any, ...]]:
    """Every readable row of `table` (matching `where`), by rowid; failures counted in `out`."""
    last = _last_rowid(con, table)
    cond = f" AND ({where})" if where else ""
    sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? AND rowid <= ?{cond}"
    found: dict[int, tuple[Any, ...]] = {}
    lo, empty = 0, 0
    while (last is not None and lo < last) or (last is None and empty < UNKNOWN_END_EMPTY_CHUNKS):
        hi = lo + CHUNK
        try:
            rows = con.execute(sql, (lo, hi)).fetchall()
        except sqlite3.Error:
            rows = _one_by_one(con, out, table, columns, range(lo + 1, hi + 1), cond)
        empty = 0 if rows else empty + 1
        found.update((int(r[0]), tuple(r[1:])) for r in rows)
        lo = hi
    return found


def _lookup(
    con: sqlite3.Connection, out: OldStore, table: str, columns: str, ids: set[int]
) -> dict[int, tuple[Any, ...]]:
    """The rows of `table` with these rowids; an id that fails is counted, one that is absent is not."""
    found: dict[int, tuple[Any, ...]] = {}
    ordered = sorted(ids)
    for start in range(0, len(ordered), CHUNK):
        chunk = ordered[start : start + CHUNK]
        marks = ",".join("?" for _ in chunk)
        try:
            sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid IN ({marks})"
            rows = con.execute(sql, chunk).fetchall()
        except sqlite3.Error:
            rows = _one_by_one(con, out, table, columns, chunk, "")
        found.update((int(r[0]), tuple(r[1:])) for r in rows)
    return found


def _one_by_one(
    con: sqlite3.Connection, out: OldStore, table: str, columns: str, ids: Any, cond: str
) -> list[Any]:
    rows: list[Any] = []
    sql = f"SELECT rowid, {columns} FROM {table} WHERE rowid = ?{cond}"
    for rowid in ids:
        try:
            rows += con.execute(sql, (rowid,)).fetchall()
        except sqlite3.Error:
            out.lost(table)
    return rows

"""The prune's archive: gzip JSON Lines, one file per table and day (per prune run), each with a
manifest; written to a temporary name, fsynced, renamed, then read back and verified before
anything is deleted (ledger.md "Retention and the identity horizon").

    <archive_dir>/<table>/<table>-<YYYY-MM-DD>-run<N>.jsonl.gz
    <archive_dir>/<table>/<table>-<YYYY-MM-DD>-run<N>.jsonl.gz.manifest.json
    <archive_dir>/<table>/<table>-<partition>-run<N>.jsonl.gz   (a whole time partition's rows)

A line is one row as PostgreSQL's `to_jsonb` writes it (column names as keys; `bytea` as
`\\x`-prefixed hex, times in RFC 3339). The manifest: `table`, `day` (or `partition`: its
name), `file`, `rows`, `bytes`, `sha256` (of the compressed file), `id_field`, `first_id`,
`last_id`, `first_time`, `last_time`, `run`, `reason`, `written_at`. No database here: files only.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from agent.ledger.errors import LedgerError

MANIFEST = ".manifest.json"
FORMAT = "edge-ledger-archive/1 (gzip JSON Lines)"
# zlib's own default: 2.3 x faster than gzip's 9 on the ledger's rows for 3.6 % more bytes
# (50,000 arrivals: 0.56 against 1.29 s, 5.41 against 5.22 MB; docs/ledger.md)
COMPRESSLEVEL = 6


class ArchiveError(LedgerError):
    """An archive file could not be written or does not match its manifest: nothing is dropped."""


@dataclass(slots=True)
class _Open:
    day: str
    tmp: Path
    raw: IO[bytes]
    gz: gzip.GzipFile
    rows: int = 0
    first_id: Any = None
    last_id: Any = None
    first_time: str | None = None
    last_time: str | None = None


@dataclass
class DayWriter:
    """Rows of one table, given in (day, id) order: one file per day, each verified once closed."""

    directory: Path
    table: str
    run: int
    id_field: str
    reason: str
    unit: str = "day"  # the manifest's key for the file's day (or "partition": its name)
    written: list[Path] = field(default_factory=list)  # the verified data files
    rows: int = 0
    _open: _Open | None = None

    def add(self, day: str, row_id: Any, at: str | None, line: str) -> None:
        if self._open is not None and self._open.day != day:
            self._close()
        if self._open is None:
            self._open = self._start(day)
        o = self._open
        o.gz.write(line.encode("utf-8") + b"\n")
        o.rows += 1
        self.rows += 1
        if o.first_id is None:
            o.first_id, o.first_time = row_id, at
        o.last_id, o.last_time = row_id, at

    def finish(self) -> list[Path]:
        if self._open is not None:
            self._close()
        return self.written

    def abandon(self) -> None:
        """After a failure: the file being written is removed (never renamed into place)."""
        if self._open is not None:
            with contextlib.suppress(OSError):
                self._open.gz.close()
                self._open.raw.close()
            with contextlib.suppress(OSError):
                self._open.tmp.unlink()
            self._open = None

    def discard(self) -> None:
        """The verified files written so far removed with their manifests (their rows were not
        pruned after all: a later run archives them again)."""
        self.abandon()
        for f in self.written:
            for path in (f, f.with_name(f.name + MANIFEST)):
                with contextlib.suppress(OSError):
                    path.unlink()
        self.written = []

    def _start(self, day: str) -> _Open:
        folder = self.directory / self.table
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{self.table}-{day}-run{self.run}.jsonl.gz.tmp"
        raw = tmp.open("wb")
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESSLEVEL)
        return _Open(day, tmp, raw, gz)

    def _close(self) -> None:
        o = self._open
        assert o is not None
        o.gz.close()
        o.raw.flush()
        os.fsync(o.raw.fileno())
        o.raw.close()
        final = o.tmp.with_name(f"{self.table}-{o.day}-run{self.run}.jsonl.gz")
        manifest = {
            "format": FORMAT,
            "table": self.table,
            self.unit: o.day,
            "file": final.name,
            "rows": o.rows,
            "bytes": o.tmp.stat().st_size,
            "sha256": sha256_of(o.tmp),
            "id_field": self.id_field,
            "first_id": o.first_id,
            "last_id": o.last_id,
            "first_time": o.first_time,
            "last_time": o.last_time,
            "run": self.run,
            "reason": self.reason,
            "written_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
        os.replace(o.tmp, final)
        _write_durably(final.with_name(final.name + MANIFEST), json.dumps(manifest, indent=1) + "\n")
        _fsync_dir(final.parent)
        self._open = None
        problems = verify(final)
        if problems:
            raise ArchiveError(f"{final}: written but does not verify: {'; '.join(problems)}")
        self.written.append(final)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_durably(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def verify(path: Path) -> list[str]:
    """Problems of one archive file (its data file or its manifest named): [] when it verifies.

    The file's size and SHA-256 as the manifest says; every line JSON; the row count, the first
    and last id as the manifest says."""
    data = path.with_name(path.name.removesuffix(MANIFEST)) if path.name.endswith(MANIFEST) else path
    manifest_path = data.with_name(data.name + MANIFEST)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"manifest {manifest_path.name} cannot be read: {exc}"]
    problems: list[str] = []
    try:
        if data.stat().st_size != manifest.get("bytes"):
            problems.append(f"size {data.stat().st_size} bytes, the manifest says {manifest.get('bytes')}")
        if sha256_of(data) != manifest.get("sha256"):
            problems.append("sha256 differs from the manifest's")
        ids = list(_ids(data, str(manifest.get("id_field"))))
    except (OSError, EOFError, ValueError, gzip.BadGzipFile) as exc:  # orjson's error is a ValueError
        return [*problems, f"cannot be read: {exc}"]
    if len(ids) != manifest.get("rows"):
        problems.append(f"{len(ids)} rows, the manifest says {manifest.get('rows')}")
    elif ids and (ids[0] != manifest.get("first_id") or ids[-1] != manifest.get("last_id")):
        problems.append("first or last id differs from the manifest's")
    return problems


def _ids(data: Path, id_field: str) -> Iterator[Any]:
    with gzip.open(data, "rb") as f:
        for n, raw in enumerate(f, 1):
            row = orjson.loads(raw)
            if not isinstance(row, dict):
                raise ValueError(f"line {n} is not a JSON object")
            yield row.get(id_field)


def files_under(path: Path) -> list[Path]:
    """The archive data files a path names: itself, or every one under a directory."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*.jsonl.gz") if not p.name.startswith("."))
    return [path]

"""A JSON Lines file parsed one batch ahead in a second process, beside the recording of the last.

`edge-agent import` records batch N (Python, holding the interpreter lock) while batch N+1 could
be parsed: a thread cannot overlap them, a process can, on the second core. `ParsedAhead`
yields the same `ImportBatch`es as `read_batches`, in file order: the first batch parsed here,
the rest of a regular file (when it is over `AHEAD_MIN_BYTES` and a second core is there) by a
child (`python -m agent.sources.parse_ahead`) on the same open file descriptor with the same
code, sent over a pipe in a compact form (`to_wire`, then `marshal`) and rebuilt here
(`from_wire`) as exactly the objects `parse_delivery` made. The child is at most about two
batches ahead (the pipe blocks) and runs `CHILD_NICE` steps nicer.

A child that stops early makes `__next__` raise `ParseProcessError`; the batches before it were
whole. `close()` kills the child; a dead parent's child ends at its next write (SIGPIPE).
How and why, with the figures: docs/architecture.md, "Import: parsing ahead".
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import marshal
import os
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from typing import IO, Any, NoReturn

from agent.core.contract import Delivery, Rejection, imported_delivery
from agent.sources.importer import BATCH_LINES, ImportBatch, _batches, _utc_now

AHEAD_MIN_BYTES = 1 << 20  # less than this after the first batch: parsed in this process
PIPE_BYTES = 1 << 20  # the pipe holds a whole batch (about 0.5 MB per 1,000 lines of 220 bytes)
_HEADER = struct.Struct("<Q")
CHILD_NICE = 10  # see the module's docstring
_GC_THRESHOLD = 10_000  # as `import_into` sets it in the parent

# `imported_delivery`'s arguments, in its order (read off its signature, so the two cannot drift):
# what a parsed line's Delivery is made of (the rest of its slots are the same for every line of a
# file: live, basis counter, no via).
_DELIVERY_ARGS = tuple(inspect.signature(imported_delivery).parameters)
_DELIVERY_WIRE = attrgetter(*_DELIVERY_ARGS)
_REJECTION_WIRE = attrgetter("raw", "reason", "arrival_at", "receiver", "line")
_DELIVERY_FIELDS = len(_DELIVERY_ARGS)


class ParseProcessError(Exception):
    """The parsing process stopped before the end of the file."""


def to_wire(item: Delivery | Rejection) -> tuple[Any, ...]:
    """A parsed line as plain values `marshal` writes (13 for a Delivery, 5 for a Rejection)."""
    return _DELIVERY_WIRE(item) if type(item) is Delivery else _REJECTION_WIRE(item)


def from_wire(values: tuple[Any, ...]) -> Delivery | Rejection:
    """The object `to_wire` was given, equal slot for slot."""
    if len(values) == _DELIVERY_FIELDS:
        return imported_delivery(*values)
    return Rejection(*values)


class ParsedAhead:
    """The file's batches (an iterator of `ImportBatch`), the second batch on from a child process
    when the file is large enough. Call `close()` when done (also after an error)."""

    def __init__(self, path: str | Path, *, receiver: str | None = None, batch_lines: int = BATCH_LINES):
        self._path = str(path)
        self._who = receiver or f"import:{os.path.basename(self._path)}"
        self._batch_lines = batch_lines
        self._file: IO[bytes] | None = open(path, "rb")  # noqa: SIM115 (closed in close())
        info = os.fstat(self._file.fileno())
        self._size = info.st_size if stat.S_ISREG(info.st_mode) else -1
        self._here: Iterator[tuple[list[Delivery | Rejection], list[int]]] | None = _batches(
            self._file, self._who, _utc_now, batch_lines
        )
        self._first = True
        self._child: subprocess.Popen[bytes] | None = None
        self._after_line = 0  # the last line number handed out
        self._lock = threading.Lock()  # one __next__ at a time; close() waits for it
        self._closing = False
        self._stderr: IO[bytes] | None = None

    @property
    def child_pid(self) -> int | None:
        """The parsing process's id while it runs (None before the second batch, or never)."""
        child = self._child
        return child.pid if child is not None else None

    def __iter__(self) -> ParsedAhead:
        return self

    def __next__(self) -> ImportBatch:
        with self._lock:
            if self._here is not None:
                assert self._file is not None
                items, lines = next(self._here)
                at = self._file.tell()
                self._after_line = lines[-1]
                if self._first:
                    self._first = False
                    if self._size - at > AHEAD_MIN_BYTES and _cores() > 1:
                        self._start(at, lines[-1] + 1)
                return ImportBatch(items, lines, at)
            return self._receive()

    def _start(self, offset: int, first_line: int) -> None:
        assert self._file is not None
        fd = self._file.fileno()
        args = (str(fd), str(offset), str(first_line), self._who, str(self._batch_lines))
        # Its stderr (a traceback, if it ever fails before it can send one) goes to a file, not a
        # pipe: a pipe nobody reads could fill and stop the child.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _release)
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "agent.sources.parse_ahead", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                pass_fds=(fd,),
                env=_child_env(),
            )
        except OSError:  # no interpreter to start (an embedded or frozen build): parsed here
            self._stderr.close()
            self._stderr = None
            return
        assert self._child.stdout is not None
        # A smaller pipe (not Linux, or a lower limit): the child waits for the reader more often.
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(self._child.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._here = None
        self._file.close()
        self._file = None

    def _receive(self) -> ImportBatch:
        child = self._child
        if child is None or child.stdout is None:
            raise StopIteration
        pipe = child.stdout
        head = pipe.read(_HEADER.size)
        if len(head) == _HEADER.size:
            (size,) = _HEADER.unpack(head)
            if size == 0:
                self._release()
                raise StopIteration
            body = pipe.read(size)
            if len(body) == size:
                message = marshal.loads(body)
                if type(message) is str:
                    self._failed(child, message)
                wire, lines, at = message
                self._after_line = lines[-1]
                return ImportBatch([from_wire(v) for v in wire], lines, at)
        self._failed(child, None)

    def _failed(self, child: subprocess.Popen[bytes], message: str | None) -> NoReturn:
        code = child.wait()
        if self._closing:  # stopped by close(): no more batches, no error
            self._release()
            raise StopIteration
        if code == -signal.SIGINT:  # Ctrl-C reached the process group: stop as this process does
            self._release()
            raise KeyboardInterrupt
        if message is None:
            said = ""
            if self._stderr is not None:
                self._stderr.seek(0)
                said = self._stderr.read(4000).decode("utf-8", "replace").strip()
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            message = how + (f": {said.splitlines()[-1]}" if said else "")
        self._release()
        raise ParseProcessError(
            f"the process parsing {self._path} stopped after line {self._after_line} ({message})"
        )

    def close(self) -> None:
        """Stop the child at once (if any) and close the file; safe to call again, and from another
        thread than the one in `__next__` (which then stops at once, with no more batches)."""
        self._closing = True
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()  # a read of its pipe in another thread returns at once
        with self._lock:
            self._release()

    def _release(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.wait()
            if child.stdout is not None:
                child.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._here = None
        if self._file is not None:
            self._file.close()
            self._file = None


def _cores() -> int:
    """The cores this process may run on: with one, a second process only adds its own work."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _child_env() -> dict[str, str]:
    """The environment, with this copy of `agent` first on the child's module path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _child(fd: int, offset: int, first_line: int, receiver: str, batch_lines: int) -> int:
    """Parse the file open as `fd` from `offset` (line `first_line`) and write each batch to stdout."""
    import gc

    gc.set_threshold(_GC_THRESHOLD, *gc.get_threshold()[1:])
    out = sys.stdout.buffer
    write, flush, header, dumps = out.write, out.flush, _HEADER.pack, marshal.dumps
    try:
        with open(fd, "rb") as f:
            f.seek(offset)
            for items, lines in _batches(f, receiver, _utc_now, batch_lines, first_line):
                body = dumps(([to_wire(x) for x in items], lines, f.tell()))
                write(header(len(body)))
                write(body)
                flush()
    except Exception as exc:  # reported to the parent, which names it and stops
        body = dumps(f"{type(exc).__name__}: {exc}")
        write(header(len(body)))
        write(body)
        flush()
        return 1
    write(header(0))
    flush()
    return 0


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: end as the signal's default does, with no traceback;
    # a parent gone (the pipe's reader) ends this process at its next write.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.nice(CHILD_NICE)
    fd_, offset_, first_, who_, lines_ = sys.argv[1:]
    sys.exit(_child(int(fd_), int(offset_), int(first_), who_, int(lines_)))

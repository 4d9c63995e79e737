"""What every command shares: the exit codes, the store context (writer or reader), running
a command's coroutine with our errors mapped to exit codes, and the quiet end on a closed stdout.

Never imports the click group (`agent.cli.main`) nor a command module.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import click

from agent.config.store import store_settings
from agent.core.errors import ConfigError, StoreError
from agent.store.connection import StoreMissing, require_existing
from agent.store.reader import Reader
from agent.store.store import Store

EX_OK = 0
EX_FAILURE = 1  # unexpected errors (click usage errors exit 2)
EX_NOINPUT = 66  # a command that needs an existing store was pointed at none
EX_UNAVAILABLE = 69  # `check --probe` could not read a device or reach an upstream
EX_IOERR = 74  # the store cannot be read or written (disk full, unwritable, damaged)
EX_NOPERM = 77  # the service's user cannot read a file it needs: the unit does not restart on 77
EX_CONFIG = 78  # configuration error: the systemd unit does not restart on 78
EX_PIPE = 141  # stdout's reader went away (`| head`): 128 + SIGPIPE, as the shell sees `head`'s producers

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 unexpected error (certs: a file exists), 2 usage, 66 no store at the path, "
    "69 `check --probe` could not read a device (or one of its nodes or registers) or reach an "
    "upstream, 74 the store could not be read or written, 77 the service's user cannot read a file "
    "it needs (or write the store's directory), 78 configuration error, 141 the reader of the output "
    "went away (e.g. `| head`): the command stopped writing quietly and closed the store. "
    "The unit does not restart on 77 or 78."
)

T = TypeVar("T")


class Context:
    """The group's options, as every command sees them (`ctx.obj`)."""

    def __init__(self, db: str | None, config: str, max_db_size: str | None, synchronous: str | None) -> None:
        self.db_path = db
        self.config = config
        self.max_db_size = max_db_size
        self.synchronous = synchronous

    def store_path(self) -> str:
        path, _, _ = store_settings(db=self.db_path, config_path=self.config, synchronous=None, max_size=None)
        return path

    def max_bytes(self) -> int | None:
        """The store's size quota from --max-db-size or the config, if any."""
        _, _, max_bytes = store_settings(
            db=self.db_path, config_path=self.config, synchronous=None, max_size=self.max_db_size
        )
        return max_bytes

    async def open_store(self) -> Store:
        """The writer, creating the store (and its directory) when missing."""
        path, sync, max_bytes = store_settings(
            db=self.db_path, config_path=self.config, synchronous=self.synchronous, max_size=self.max_db_size
        )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return await Store.open(path, synchronous=sync, max_bytes=max_bytes)

    async def open_existing_store(self) -> Store:
        """The writer of a store that must exist already (StoreMissing otherwise; nothing is created)."""
        path, sync, max_bytes = store_settings(
            db=self.db_path, config_path=self.config, synchronous=self.synchronous, max_size=self.max_db_size
        )
        return await Store.open(require_existing(path), synchronous=sync, max_bytes=max_bytes)

    async def open_reader(self) -> Reader:
        """A read-only view of an existing store (StoreMissing otherwise; nothing is created)."""
        return await Reader.open(self.store_path())


def run_mapped(
    fn: Callable[[], Awaitable[T]], program: str, codes: Sequence[tuple[type[Exception], int]]
) -> T:
    """Run a command's coroutine; a ConfigError exits 78, an error of `codes` the code of the first
    kind it is, each with its message after `program: `."""
    try:
        return asyncio.run(fn())  # type: ignore[arg-type]
    except ConfigError as exc:
        click.echo(f"{program}: configuration error: {exc}", err=True)
        sys.exit(EX_CONFIG)
    except tuple(kind for kind, _ in codes) as exc:
        click.echo(f"{program}: {exc}", err=True)
        sys.exit(next(code for kind, code in codes if isinstance(exc, kind)))


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine and map our errors to exit codes with a clear message."""
    return run_mapped(fn, "edge-agent", ((StoreMissing, EX_NOINPUT), (StoreError, EX_IOERR)))


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe or socket whose reader has closed (so a write would EPIPE)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def exit_closed_pipe() -> NoReturn:
    """Stop writing: point stdout at /dev/null (the interpreter's last flush must not fail again)
    and exit as a producer killed by SIGPIPE would, printing nothing on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    sys.exit(EX_PIPE)


@contextlib.contextmanager
def quiet_on_closed_stdout() -> Iterator[None]:
    """Around a whole command: what it wrote is flushed inside, and a BrokenPipeError from a stdout
    whose reader went away ends the process with EX_PIPE. Other broken pipes are raised as they are."""
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        exit_closed_pipe()

"""What the ledger's commands share: the connection, the extra's check, the errors' exit codes.

The ledger's modules need psycopg (the optional extra `edge-agent[ledger]`), so they are
imported inside each command: a gateway without the extra still runs every other command, and
`edge-agent ledger` without it says what to install.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent.cli.context import EX_CONFIG, EX_IOERR, EX_UNAVAILABLE, run_mapped

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

LEDGER_EXIT_HELP = (
    "Exit codes: 0 ok, 1 unexpected error, 2 usage, 69 PostgreSQL could not be reached, 74 the ledger "
    "could not be written or its schema is not this program's, 78 configuration error or the ledger "
    "extra is not installed."
)


class LedgerContext:
    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn

    async def open(self, *, migrate: bool) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        """A connection; with `migrate`, the schema brought up to date, else checked."""
        from agent.ledger import migrations
        from agent.ledger.connection import connect

        conn = await connect(self.dsn)
        try:
            if migrate:
                from agent.ledger import time_partitions

                await migrations.migrate(conn)
                await time_partitions.ensure(conn, None)  # the period the ledger's partitions have
            else:
                await migrations.check(conn)
        except Exception:
            await conn.close()
            raise
        return conn


def require_extra() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        click.echo(
            "edge-agent: the ledger needs its optional dependencies: pip install 'edge-agent[ledger]'",
            err=True,
        )
        sys.exit(EX_CONFIG)


def run_ledger(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a ledger command's coroutine and map the ledger's errors to exit codes."""
    from agent.ledger.errors import LedgerError, LedgerUnavailable

    return run_mapped(fn, "edge-agent ledger", ((LedgerUnavailable, EX_UNAVAILABLE), (LedgerError, EX_IOERR)))

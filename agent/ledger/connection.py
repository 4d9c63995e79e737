"""Opening a connection to the ledger database: `--dsn`, else the standard libpq environment.

A DSN may be a URI or `key=value` text; an empty one means libpq's defaults and `PG*`
variables (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSFILE`), so a password never
has to be on a command line. Connections use READ COMMITTED (the arbitration depends on it:
its second statement must see rows another arbiter committed while the first one waited), UTC,
and no JIT compilation (`connect`).
A multi-host DSN (`host=a,b port=P1,P2`, or the URI form) finds the primary: `failover.conninfo`
adds `target_session_attrs=read-write` and short timeouts unless the DSN names its own.
"""

from __future__ import annotations

import psycopg

from agent.ledger import failover
from agent.ledger.errors import LedgerError, LedgerUnavailable


async def connect(
    dsn: str | None, *, password: str | None = None
) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """An open autocommit-off connection, or LedgerUnavailable naming where it tried.

    `password` (read from the config's `password_file`) is passed apart from the DSN.
    """
    try:
        conninfo = failover.conninfo(dsn, password=password)
    except psycopg.ProgrammingError as exc:
        raise LedgerError(f"the DSN cannot be read: {_first_line(exc)}") from exc
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, application_name="edge-agent-ledger")
        # JIT compiles a plan whose estimate passes jit_above_cost: the arrival-key lookup of a
        # batch over 27 time partitions did (184 ms of a 335 ms lookup of 1,000 keys went to
        # compiling, on a 20M-arrival ledger, bench/ledger_years.py); the ledger's statements are
        # short and many.
        await conn.execute("SELECT set_config('TimeZone', 'UTC', false), set_config('jit', 'off', false)")
        await conn.commit()
    except psycopg.Error as exc:
        if not failover.unavailable(exc):
            raise
        raise LedgerUnavailable(f"PostgreSQL {describe(dsn)}: cannot connect: {_reason(exc)}") from exc
    return conn


def describe(dsn: str | None) -> str:
    """Where a DSN points, for messages: never its password."""
    if not dsn:
        return "(libpq environment)"
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparseable DSN)"
    host = info.get("host", "")
    port = info.get("port", "")
    db = info.get("dbname", "")
    return f"{host}:{port}/{db}" if host or port or db else "(libpq environment)"


def _reason(exc: BaseException) -> str:
    """libpq's reason, all hosts of a multi-host DSN on one line."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    return text or type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

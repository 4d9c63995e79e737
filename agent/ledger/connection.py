"""Opening a connection to the ledger database: `--dsn`, else the standard libpq environment.

A DSN may be a URI or `key=value` text; an empty one means libpq's defaults and `PG*`
variables (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSFILE`), so a password never
has to be on a command line. Connections use READ COMMITTED (the arbitration depends on it:
its second statement must see rows another arbiter committed while the first one waited).
"""

from __future__ import annotations

import psycopg

from agent.ledger.errors import LedgerUnavailable

CONNECT_TIMEOUT_S = 10


async def connect(
    dsn: str | None, *, password: str | None = None
) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """An open autocommit-off connection, or LedgerUnavailable naming where it tried.

    `password` (read from the config's `password_file`) is passed apart from the DSN.
    """
    conninfo = psycopg.conninfo.make_conninfo(dsn or "", password=password) if password else (dsn or "")
    try:
        conn = await psycopg.AsyncConnection.connect(
            conninfo, connect_timeout=CONNECT_TIMEOUT_S, application_name="edge-agent-ledger"
        )
    except psycopg.OperationalError as exc:
        raise LedgerUnavailable(f"PostgreSQL {describe(dsn)}: cannot connect: {_first_line(exc)}") from exc
    await conn.execute("SET TIME ZONE 'UTC'")
    await conn.commit()
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

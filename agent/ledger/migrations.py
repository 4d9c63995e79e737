"""Forward-only numbered migrations of the ledger schema (`sql/migrations/NNNN_name.sql`).

Each migration runs in its own transaction with its version row inserted first, under a
transaction-level advisory lock, so two ledger processes starting at once apply it once. A
database whose schema is newer than this program knows is refused (an older ledger must not
write into a schema it does not understand).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import cast

import psycopg

from agent.ledger import failover
from agent.ledger.errors import LedgerUnavailable, SchemaError

log = logging.getLogger(__name__)

LOCK_ID = 0x6C6564676572  # "ledger": the advisory lock that serialises migrations
_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS ledger_schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with this program, in order (numbers must run 1, 2, 3, ...)."""
    folder = resources.files("agent.ledger").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        m = _NAME.fullmatch(entry.name)
        if m:
            found.append(Migration(int(m[1]), m[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    numbers = [mig.version for mig in found]
    if numbers != list(range(1, len(found) + 1)):
        raise SchemaError(f"ledger migrations are not numbered 1..{len(found)}: {numbers}")
    return found


async def current_version(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> int:
    """The highest applied migration (0 for an empty database)."""
    cur = await conn.execute("SELECT to_regclass('ledger_schema_version') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        await conn.rollback()
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM ledger_schema_version")
    row = await cur.fetchone()
    await conn.rollback()
    return int(cast(int, row[0])) if row else 0


async def migrate(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[int]:
    """Apply what is pending; returns the versions applied now. Refuses a newer schema."""
    known = migrations()
    applied: list[int] = []
    try:
        for mig in known:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
                await conn.execute(VERSION_TABLE)
                cur = await conn.execute("SELECT coalesce(max(version), 0) FROM ledger_schema_version")
                row = await cur.fetchone()
                have = int(cast(int, row[0])) if row else 0
                if have > len(known):
                    raise SchemaError(
                        f"the ledger database has schema version {have}, newer than this program's "
                        f"{len(known)}: upgrade edge-agent before running it against this database"
                    )
                if have >= mig.version:
                    continue
                await conn.execute(
                    "INSERT INTO ledger_schema_version (version, name) VALUES (%s, %s)",
                    (mig.version, mig.name),
                )
                await conn.execute(mig.sql.encode())  # our own file, not input
                applied.append(mig.version)
                log.info("ledger schema migrated version=%d name=%s", mig.version, mig.name)
    except psycopg.Error as exc:
        if not failover.unavailable(exc):
            raise
        raise LedgerUnavailable(f"PostgreSQL went away during a migration: {exc}") from exc
    return applied


async def check(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    """Raise SchemaError unless the schema is exactly this program's latest."""
    have = await current_version(conn)
    want = len(migrations())
    if have != want:
        raise SchemaError(
            f"the ledger schema is at version {have}, this program needs {want}:"
            " run `edge-agent ledger migrate`"
        )

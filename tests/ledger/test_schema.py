"""The ledger's schema: migrated == declared (`agent/ledger/sql/schema.sql`, a normalised
`pg_dump --schema-only` of a freshly migrated database), and the migration rules."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent.ledger import migrations
from agent.ledger.connection import connect
from agent.ledger.errors import SchemaError

SCHEMA = Path(__file__).parents[2] / "agent" / "ledger" / "sql" / "schema.sql"
HEADER = (
    "-- The ledger schema as the migrations make it: a normalised `pg_dump --schema-only`.\n"
    "-- Generated; never edit by hand. Regenerate: EDGE_LEDGER_WRITE_SCHEMA=1 pytest tests/ledger/test_schema.py\n"
)


def normalise(dump: str) -> str:
    """Only the DDL: no comments, SET lines, blank runs or version-dependent noise."""
    out = []
    for line in dump.splitlines():
        if line.startswith("--") or re.match(r"(SET |SELECT pg_catalog\.set_config|\\(un)?restrict )", line):
            continue
        if line.strip() or (out and out[-1].strip()):
            out.append(line.rstrip())
    return HEADER + "\n".join(out).strip() + "\n"


def dump(cluster: Any, dsn: str) -> str:
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    proc = subprocess.run(
        [
            str(cluster.bindir / "pg_dump"),
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "-h",
            "127.0.0.1",
            "-p",
            str(cluster.port),
            "-U",
            "postgres",
            str(dbname),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return normalise(proc.stdout)


def test_the_migrated_schema_is_the_declared_one(pg_cluster: Any, ledger_dsn: str) -> None:
    got = dump(pg_cluster, ledger_dsn)
    if os.environ.get("EDGE_LEDGER_WRITE_SCHEMA"):
        SCHEMA.write_text(got)
    assert got == SCHEMA.read_text(), (
        "the migrations no longer make agent/ledger/sql/schema.sql: add a migration (never edit an applied one), "
        "then regenerate it with EDGE_LEDGER_WRITE_SCHEMA=1"
    )


async def test_migrating_twice_changes_nothing_and_versions_are_recorded(pg_dsn: str) -> None:
    conn = await connect(pg_dsn)
    try:
        assert await migrations.migrate(conn) == list(range(1, len(migrations.migrations()) + 1))
        assert await migrations.migrate(conn) == []
        await migrations.check(conn)
    finally:
        await conn.close()


async def test_a_newer_schema_is_refused(ledger_dsn: str) -> None:
    conn = await connect(ledger_dsn)
    try:
        newer = len(migrations.migrations()) + 1
        await conn.execute(
            "INSERT INTO ledger_schema_version (version, name) VALUES (%s, 'future')", (newer,)
        )
        await conn.commit()
        with pytest.raises(SchemaError, match="newer than this program"):
            await migrations.migrate(conn)
        with pytest.raises(SchemaError, match="needs"):
            await migrations.check(conn)
    finally:
        await conn.close()

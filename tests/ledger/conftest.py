"""PostgreSQL for the ledger tests: one throwaway cluster per session, a fresh database per test.

Skips (with the reason) when psycopg or the PostgreSQL server binaries are missing. Never uses
a server the machine happens to run.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pgcluster.py is a sibling file, not a package
import pgcluster

psycopg = pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    bindir = pgcluster.find_binaries()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    cluster = pgcluster.create(bindir)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_dsn(pg_cluster: pgcluster.Cluster) -> Iterator[str]:
    """A new empty database on the session's cluster; dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_cluster.dsn(name)
    finally:
        with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def ledger_conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection]:  # type: ignore[type-arg]
    """A migrated database and an open connection to it."""
    from agent.ledger import migrations
    from agent.ledger.connection import connect

    conn = await connect(pg_dsn)
    await migrations.migrate(conn)
    try:
        yield conn
    finally:
        await conn.close()

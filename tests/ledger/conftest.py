"""PostgreSQL for the ledger tests: one throwaway cluster per session, a fresh database per test.

Skips (with the reason) when psycopg or the PostgreSQL server binaries are missing. Never uses
a server the machine happens to run.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pgcluster.py is a sibling file, not a package
import pgcluster
from mosquitto import Broker
from pgcluster import free_port
from webhook import Receiver

psycopg = pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    bindir = pgcluster.find_binaries()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    cluster = pgcluster.create(bindir, durable=False)
    try:
        _make_template(cluster)
        yield cluster
    finally:
        cluster.destroy()


TEMPLATE = "ledger_template"


def _make_template(cluster: pgcluster.Cluster) -> None:
    """One migrated database to copy for every test that needs a ledger."""
    from agent.ledger import migrations
    from agent.ledger.connection import connect

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE}")

    async def go() -> None:
        conn = await connect(cluster.dsn(TEMPLATE))
        try:
            await migrations.migrate(conn)
        finally:
            await conn.close()

    asyncio.run(go())


def _new_database(cluster: pgcluster.Cluster, template: str | None) -> str:
    # Databases are not dropped one by one: the whole cluster is thrown away at the end.
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    return cluster.dsn(name)


@pytest.fixture
def pg_dsn(pg_cluster: pgcluster.Cluster) -> str:
    """A new empty database (no ledger schema) on the session's cluster."""
    return _new_database(pg_cluster, None)


@pytest.fixture
def ledger_dsn(pg_cluster: pgcluster.Cluster) -> str:
    """A new database with the ledger's schema migrated."""
    return _new_database(pg_cluster, TEMPLATE)


@pytest.fixture(scope="session")
def shared_ledger_dsn(pg_cluster: pgcluster.Cluster) -> str:
    """One migrated database for the many small table cases (each empties it first: `reset`)."""
    return _new_database(pg_cluster, TEMPLATE)


async def reset(conn: psycopg.AsyncConnection) -> None:  # type: ignore[type-arg]
    """Empty every ledger table (ids start again at 1)."""
    cur = await conn.execute(
        "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables"
        " WHERE schemaname = 'public' AND tablename <> 'ledger_schema_version'"
    )
    row = await cur.fetchone()
    assert row is not None
    await conn.execute(f"TRUNCATE {row[0]} RESTART IDENTITY CASCADE")
    await conn.commit()


@pytest.fixture
async def shared_conn(shared_ledger_dsn: str) -> AsyncIterator[psycopg.AsyncConnection]:  # type: ignore[type-arg]
    """A connection to the shared migrated database, emptied."""
    from agent.ledger.connection import connect

    conn = await connect(shared_ledger_dsn)
    try:
        await reset(conn)
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def ledger_conn(ledger_dsn: str) -> AsyncIterator[psycopg.AsyncConnection]:  # type: ignore[type-arg]
    """A migrated database and an open connection to it."""
    from agent.ledger.connection import connect

    conn = await connect(ledger_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def own_cluster(pg_cluster: pgcluster.Cluster) -> AsyncIterator[pgcluster.Cluster]:
    """A throwaway cluster of the test's own (it may stop and start it), the ledger migrated in its
    `postgres` database (`own_cluster.dsn()`)."""
    from agent.ledger import migrations
    from agent.ledger.connection import connect

    own = pgcluster.create(pg_cluster.bindir, durable=False)
    try:
        conn = await connect(own.dsn())
        try:
            await migrations.migrate(conn)
        finally:
            await conn.close()
        yield own
    finally:
        own.destroy()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A Mosquitto of the test's own, set up as docs/ledger-setup.md says (tests/ledger/mosquitto.py)."""
    b = Broker(tmp_path)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/notify", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    r.port = free_port()
    await web.TCPSite(runner, "127.0.0.1", r.port).start()
    try:
        yield r
    finally:
        await runner.cleanup()

"""The hash-partitioned layout (`sql/layouts/partitioned_by_source.sql`): made once on a new,
migrated, empty ledger database; the arbiter, the report and the notifier run on it unchanged.
canonical_event is hash-partitioned by source; arrival and notification are range-partitioned by
time, each time partition hash-partitioned by source (`agent.ledger.time_partitions`).
See docs/ledger.md, "Growing past one server", and docs/retention.md."""

from __future__ import annotations

from importlib import resources
from typing import Any

import psycopg

from agent.ledger import time_partitions
from agent.ledger.errors import LedgerError

DEFAULT_PARTITIONS = 8


def script() -> str:
    return (
        resources.files("agent.ledger")
        .joinpath("sql", "layouts", "partitioned_by_source.sql")
        .read_text(encoding="utf-8")
    )


async def partition_by_source(
    conn: psycopg.AsyncConnection[Any], partitions: int = DEFAULT_PARTITIONS
) -> None:
    """Partition canonical_event by hash of `source`, and arrival and notification by time then by
    hash of `source` (one transaction); then the time partitions of now and the next months."""
    if not 1 <= partitions <= 1024:
        raise LedgerError(f"partitions must be 1..1024, not {partitions}")
    async with conn.transaction():
        await conn.execute("SELECT set_config('ledger.partitions', %s, true)", (str(partitions),))
        await conn.execute(script().encode())
    await time_partitions.ensure(conn)

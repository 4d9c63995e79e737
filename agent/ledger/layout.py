"""The hash-partitioned layout (`sql/layouts/partitioned_by_source.sql`): made once on a new,
migrated, empty ledger database; the arbiter, the report and the notifier run on it unchanged.
See docs/ledger.md, "Growing past one server"."""

from __future__ import annotations

from importlib import resources
from typing import Any

import psycopg

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
    """Partition canonical_event, arrival and notification by hash of `source` (one transaction)."""
    if not 1 <= partitions <= 1024:
        raise LedgerError(f"partitions must be 1..1024, not {partitions}")
    async with conn.transaction():
        await conn.execute("SELECT set_config('ledger.partitions', %s, true)", (str(partitions),))
        await conn.execute(script().encode())

"""After pruning, the space given back stays given back: the WAL that grew while pruning is
truncated, so it never keeps the room that pruning freed (a full disk must see it come back)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.retention import RetentionSettings
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.core.timestamps import format_timestamp
from agent.store.prune import prune
from agent.store.store import Store

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = RetentionSettings(
    arrivals=timedelta(days=1),
    payloads=timedelta(days=2),
    keys=timedelta(days=400),
    batch_rows=5000,
    duty=1.0,
)


def delivery(i: int) -> Delivery:
    obj = {"source": "PUMP-07/Trip", "transitionId": str(i), "bootId": "B1", "payload": {"pad": "x" * 400}}
    got = parse_delivery(json.dumps(obj), arrival_at=format_timestamp(T0), receiver="test")
    assert isinstance(got, Delivery)
    return got


def size(path: Path) -> int:
    return os.path.getsize(path) if path.exists() else 0


async def test_pruning_gives_the_space_back_and_the_wal_does_not_keep_it(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    store = await Store.open(db)
    try:
        await store.register_upstreams([("central", "none")], format_timestamp(T0))
        for start in range(0, 4000, 1000):
            await store.record([delivery(i) for i in range(start, start + 1000)])
        async with store._lock, store._transaction():
            await store.db.execute(
                "UPDATE outbox SET state = 'delivered', sent_at = ?", (format_timestamp(T0),)
            )
        async with store._lock:
            await store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = size(db)
        totals = await prune(store, SETTINGS, T0 + timedelta(days=10))
        assert totals.pages_freed > 0
        wal = size(Path(f"{db}-wal"))
        assert wal == 0, f"the WAL kept {wal} bytes after pruning"
        assert size(db) < before / 2
    finally:
        await store.close()

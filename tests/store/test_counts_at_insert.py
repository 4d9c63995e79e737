"""A new canonical event repeated in its own batch is inserted with its counts (status, later
arrivals, conflicts, first and last arrival): the same row as when the repeats come in a later
batch and the counts are updated (agent.store.batch.insert_canonicals)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.store.store import Store


def d(tid: str, v: int, at: str) -> Delivery:
    obj = {"source": "PUMP-07/Trip", "transitionId": tid, "bootId": "B17", "payload": {"v": v}}
    got = parse_delivery(json.dumps(obj), arrival_at=at, receiver="test")
    assert isinstance(got, Delivery)
    return got


FIRST = [d("1", 1, "2026-04-22T08:00:05.000Z"), d("2", 1, "2026-04-22T08:00:05.000Z")]
REPEATS = [
    d("1", 1, "2026-04-22T08:00:09.000Z"),
    d("1", 2, "2026-04-22T08:00:01.000Z"),  # a conflict that arrived earlier (clock of another receiver)
    d("2", 1, "2026-04-22T08:00:07.000Z"),
]


def events(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT canonical_id, status, duplicate_count, conflict_count, first_arrival, last_arrival,"
            " first_arrival_id FROM events ORDER BY canonical_id"
        ).fetchall()


@pytest.mark.parametrize("batches", [[FIRST + REPEATS], [FIRST, REPEATS]], ids=["one batch", "two batches"])
async def test_counts_of_a_new_event_repeated_in_its_batch(
    tmp_path: Path, batches: list[list[Delivery]]
) -> None:
    store = await Store.open(str(tmp_path / "s.db"))
    try:
        for batch in batches:
            await store.record(batch)
    finally:
        await store.close()
    assert events(tmp_path / "s.db") == [
        (1, "DuplicateConflict", 2, 1, "2026-04-22T08:00:01.000Z", "2026-04-22T08:00:09.000Z", 1),
        (2, "Canonical", 1, 0, "2026-04-22T08:00:05.000Z", "2026-04-22T08:00:07.000Z", 2),
    ]

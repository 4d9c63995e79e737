"""Retention on a real store with an injected clock: what goes, what never goes, what is remembered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.config.retention import RetentionSettings
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.core.timestamps import format_timestamp
from agent.store import report
from agent.store.prune import prune
from agent.store.store import Store

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = RetentionSettings(
    arrivals=timedelta(days=30), payloads=timedelta(days=90), keys=timedelta(days=400)
)


def at(days: float) -> str:
    return format_timestamp(T0 + timedelta(days=days))


def d(
    tid: str,
    day: float,
    *,
    boot: str | None = "B1",
    state: str = "Trip",
    ts: bool = True,
    ts_day: float | None = None,
) -> Delivery:
    """A delivery arriving on `day` (days after T0); its sourceTimestamp is `ts_day` (default: `day`)."""
    obj: dict[str, Any] = {"source": "PUMP-07/Trip", "transitionId": tid, "payload": {"state": state}}
    if boot is not None:
        obj["bootId"] = boot
    if ts:
        obj["sourceTimestamp"] = at(day if ts_day is None else ts_day)
    got = parse_delivery(json.dumps(obj), arrival_at=at(day), receiver="test")
    assert isinstance(got, Delivery)
    return got


async def deliver_all(store: Store, day: float) -> None:
    async with store._lock, store._transaction():
        await store.db.execute(
            "UPDATE outbox SET state = 'delivered', sent_at = ? WHERE state = 'pending'", (at(day),)
        )


async def counts(store: Store) -> tuple[int, int, int]:
    rows = await store.db.execute_fetchall(
        "SELECT (SELECT count(*) FROM arrivals), (SELECT count(*) FROM events), (SELECT count(*) FROM event_keys)"
    )
    a, e, k = next(iter(rows))
    return int(a), int(e), int(k)


@pytest.fixture
async def routed(store: Store) -> Store:
    await store.register_upstreams([("mqtt", "none"), ("http", "none")], at(0))
    return store


async def test_nothing_unsent_is_ever_pruned_however_old(routed: Store) -> None:
    await routed.record([d("1", 0), d("2", 0), d("3", 0, boot=None)])
    async with routed._lock, routed._transaction():  # one upstream took it, the other has not yet
        await routed.db.execute("UPDATE outbox SET state = 'delivered' WHERE upstream = 'mqtt'")
        await routed.db.execute("UPDATE outbox SET state = 'rejected' WHERE upstream = 'http' AND ref_id = 2")
    totals = await prune(routed, SETTINGS, T0 + timedelta(days=5000))
    assert (totals.arrivals, totals.payloads, totals.keys_forgotten) == (0, 0, 0)
    assert await counts(routed) == (3, 2, 0)


async def test_an_event_never_routed_to_an_upstream_is_kept(store: Store) -> None:
    await store.record([d("1", 0)])
    await prune(store, SETTINGS, T0 + timedelta(days=5000))
    assert await counts(store) == (1, 1, 0)


async def test_delivered_data_goes_at_each_horizon(routed: Store) -> None:
    await routed.record([d("1", 0)])
    await routed.record([d("2", 0)])
    await routed.record([d("1", 0.5, ts_day=0)])  # a duplicate: two arrivals for key 1
    await deliver_all(routed, 1)
    await prune(routed, SETTINGS, T0 + timedelta(days=30))
    assert await counts(routed) == (3, 2, 0), "one day short of the arrival horizon: all kept"
    await prune(routed, SETTINGS, T0 + timedelta(days=31))
    assert await counts(routed) == (1, 2, 0), "arrivals gone, except the BootObserved evidence"
    await prune(routed, SETTINGS, T0 + timedelta(days=91))
    assert await counts(routed) == (1, 1, 1), "key 2's payload went; key 1 holds the boot's first arrival"
    outbox = await routed.db.execute_fetchall("SELECT count(*) FROM outbox WHERE kind = 'transition'")
    assert outbox[0][0] == 2
    await prune(routed, SETTINGS, T0 + timedelta(days=401))
    assert await counts(routed) == (1, 1, 0)
    forgotten = await routed.db.execute_fetchall("SELECT source, boot_id, keys FROM forgotten_keys")
    assert [tuple(r) for r in forgotten] == [("PUMP-07/Trip", "B1", 1)]
    boots = [b async for b in report.boots(routed.db)]
    assert len(boots) == 1


async def test_redelivery_after_payload_pruning_is_still_duplicate_or_conflict(routed: Store) -> None:
    await routed.record([d("0", 0)])  # first of the boot: its arrival is boot evidence
    await routed.record([d("1", 1)])
    await deliver_all(routed, 2)
    await prune(routed, SETTINGS, T0 + timedelta(days=100))
    assert await counts(routed) == (1, 1, 1)
    again = await routed.record(
        [d("1", 150, ts_day=1), d("1", 151, ts_day=1, state="Normal"), d("1", 152, ts_day=1)]
    )
    assert [(o.decision.value, o.flags) for o in again] == [
        ("duplicate", ("payload_pruned",)),
        ("conflict", ("payload_pruned",)),
        ("duplicate", ("payload_pruned",)),
    ]
    assert {o.canonical_id for o in again} == {2}
    assert await counts(routed) == (4, 1, 1)
    row = await routed.db.execute_fetchall("SELECT conflict_count, last_arrival FROM event_keys")
    assert tuple(row[0]) == (1, at(152))
    # A key record with a conflict waits for review: never forgotten, its conflict arrival kept.
    await prune(routed, SETTINGS, T0 + timedelta(days=2000))
    assert await counts(routed) == (2, 1, 1), "boot evidence and the conflict arrival stay"


async def test_after_the_key_horizon_a_redelivery_is_flagged_and_counted(routed: Store) -> None:
    await routed.record([d("0", 0)])
    await routed.record([d("1", 1), d("2", 1, ts=False)])
    await deliver_all(routed, 2)
    await prune(routed, SETTINGS, T0 + timedelta(days=500))
    assert await counts(routed) == (1, 1, 0)
    late = await routed.record([d("1", 1), d("2", 1, ts=False), d("3", 499), d("4", 1, boot="B2")])
    assert [(o.decision.value, o.flags) for o in late] == [
        ("inserted", ("key_horizon_passed",)),
        ("inserted", ("key_horizon_passed",)),
        ("inserted", ()),  # younger than anything forgotten
        ("inserted", ()),  # another generation: nothing of it was forgotten
    ]
    n = await routed.db.execute_fetchall(
        "SELECT value FROM retention_counts WHERE name = 'key_horizon_passed'"
    )
    assert n[0][0] == 2
    arrivals = [a async for a in report.arrivals(routed.db)]
    assert [a["flags"] for a in arrivals if a["transitionId"] == "1"] == [["key_horizon_passed"]]


async def test_a_conflict_awaiting_review_is_never_pruned(routed: Store) -> None:
    await routed.record([d("0", 0), d("1", 0)])
    await routed.record([d("1", 0.1, state="Normal")])
    await deliver_all(routed, 1)
    await prune(routed, SETTINGS, T0 + timedelta(days=5000))
    assert await counts(routed) == (3, 2, 0)

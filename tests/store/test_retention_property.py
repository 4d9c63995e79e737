"""Property: on any store, pruning removes exactly what the dry run said, and never anything unsent."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.retention import RetentionSettings
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.core.timestamps import format_timestamp
from agent.store.prune import prune
from agent.store.prune_plan import plan
from agent.store.store import Store

pytestmark = pytest.mark.timeout(90)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = RetentionSettings(
    arrivals=timedelta(days=10), payloads=timedelta(days=20), keys=timedelta(days=40)
)

delivery = st.tuples(
    st.integers(0, 15),  # transitionId: repeats make duplicates
    st.sampled_from(["B1", "B2", None]),  # None: identity incomplete
    st.sampled_from(["Trip", "Normal"]),  # differing content makes conflicts
    st.integers(0, 60),  # arrival day
)
outbox_state = st.sampled_from(["delivered", "delivered", "delivered", "pending", "rejected"])


def make(tid: int, boot: str | None, state: str, day: int) -> Delivery:
    obj: dict[str, Any] = {"source": "P/T", "transitionId": tid, "payload": {"state": state}}
    if boot:
        obj["bootId"] = boot
    got = parse_delivery(json.dumps(obj), arrival_at=format_timestamp(T0 + timedelta(days=day)), receiver="t")
    assert isinstance(got, Delivery)
    return got


async def unsent(store: Store) -> set[int]:
    rows = await store.db.execute_fetchall(
        "SELECT ref_id FROM outbox WHERE kind = 'transition' AND state <> 'delivered'"
    )
    return {int(r[0]) for r in rows}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(delivery, min_size=1, max_size=6), min_size=1, max_size=6),
    states=st.lists(outbox_state, min_size=64, max_size=64),
    now_day=st.integers(0, 120),
)
async def test_prune_does_what_the_dry_run_says_and_keeps_the_unsent(
    batches: list[list[tuple[int, str | None, str, int]]], states: list[str], now_day: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(Path(tmp) / "s.db")
        try:
            await store.register_upstreams([("a", "none"), ("b", "none")], format_timestamp(T0))
            for batch in batches:
                await store.record([make(*x) for x in batch])
            async with store._lock, store._transaction():
                for i, s in enumerate(states):
                    await store.db.execute("UPDATE outbox SET state = ? WHERE outbox_id = ?", (s, i + 1))
            keep = await unsent(store)
            now = T0 + timedelta(days=now_day)
            expected = await plan(store, SETTINGS, now)
            done = await prune(store, SETTINGS, now)
            assert done.arrivals == expected["arrivals"].goes
            assert done.payloads == expected["payloads"].goes
            events = {int(r[0]) for r in await store.db.execute_fetchall("SELECT canonical_id FROM events")}
            assert keep <= events, "an event not delivered everywhere was pruned"
            pending = await store.db.execute_fetchall(
                "SELECT count(*) FROM pending WHERE arrival_id NOT IN (SELECT arrival_id FROM arrivals)"
            )
            assert pending[0][0] == 0, "an identity-incomplete arrival was pruned"
            # Every key that was ever stored is still decided against its canonical (or flagged).
            again = await store.record([make(*x) for b in batches for x in b if x[1]])
            for o in again:
                assert o.decision.value in ("duplicate", "conflict") or "key_horizon_passed" in o.flags
        finally:
            await store.close()

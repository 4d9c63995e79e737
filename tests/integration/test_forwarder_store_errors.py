"""A store that cannot be written never stops the forwarder: it says so, keeps the rows, resumes.

The fault is real SQLite, not a mock: `PRAGMA query_only` makes every write on the store's
connection fail with "attempt to write a readonly database", the same path a full disk takes
(`StoreError` from `Outbox.settle`). A regression of this once made `edge-agent run` exit 1
when the disk filled while the forwarder was marking rows delivered.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent.config.upstreams import Backoff, HttpUpstream
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.store.store import Store
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(60)


def deliveries(count: int) -> list[Delivery]:
    out = []
    for n in range(count):
        obj = {"source": "PUMP-07/Trip", "transitionId": n + 1, "bootId": "B17", "payload": {"n": n}}
        got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(got, Delivery)
        out.append(got)
    return out


async def pending(store: Store) -> int:
    rows = list(await store.db.execute_fetchall("SELECT count(*) FROM outbox WHERE state = 'pending'"))
    return int(rows[0][0])


async def test_the_forwarder_survives_a_store_it_cannot_write_and_resumes(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.register_upstreams([("hist", "none")], "2026-04-22T08:00:00.000Z")
    await store.record(deliveries(30))
    rows = await pending(store)  # 30 transitions and the boot they show
    async with Receiver() as rx:
        up = HttpUpstream("hist", rx.url + "/in", batch_size=10, read_size=10, backoff=Backoff(0.05, 0.2))
        sink = build_sink(up, site="plant-1", gateway="gw")
        fwd = Forwarder(store, sink, up, site="plant-1", gateway="gw", idle_poll_s=0.05)
        stop = asyncio.Event()
        rx.stall(None)  # the upstream takes the first batch and holds its answer
        task = asyncio.create_task(fwd.run(stop, drain_s=1.0))
        async with asyncio.timeout(20):
            while rx.stats()["requests"] == 0:
                await asyncio.sleep(0.02)
        await store.db.execute("PRAGMA query_only = 1")  # from now on every write fails...
        rx.release()  # ...so marking the acknowledged batch delivered fails, and so does the next claim
        async with asyncio.timeout(20):
            while fwd.state.last_error is None or "store" not in fwd.state.last_error:
                await asyncio.sleep(0.02)
        await asyncio.sleep(1.5)  # a while of an unwritable store: the forwarder must live through it
        assert not task.done(), "the forwarder must keep running while the store cannot be written"
        assert "store" in (fwd.state.last_error or "")
        assert await pending(store) == rows, "rows the store could not mark stay pending (sent again later)"
        await store.db.execute("PRAGMA query_only = 0")  # space is back
        async with asyncio.timeout(20):
            while await pending(store):
                await asyncio.sleep(0.05)
        stop.set()
        await task
        await sink.close()
        stats = rx.stats()
    await store.close()
    assert stats["distinct"] == rows == 31
    assert stats["redeliveries"] >= 1, "what was sent while the store was read-only went again, same ids"

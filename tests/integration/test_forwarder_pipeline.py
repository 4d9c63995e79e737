"""The forwarder's pipeline over many reads, on a real SQLite file and a real HTTP receiver:
the next rows are claimed and encoded while the batch before them is settled, and still no
event leaves before its attempt is committed.

Every publish is checked against the store file through a connection of its own, at the
moment the batch is handed to the sink: each event's row is pending and its committed
`attempts` is the `attempt` the event carries.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.config.upstreams import Backoff, HttpUpstream
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.core.send_outcome import SendOutcome
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.sinks.encode import Event
from agent.store.store import Store
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(60)

SITE, GW, UP = "plant-1", "gw-test", "hist"


def deliveries(count: int) -> list[Delivery]:
    out = []
    for n in range(1, count + 1):
        obj = {"source": f"PUMP-{n % 3}/Trip", "transitionId": n, "bootId": "B17", "payload": {"n": n}}
        got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(got, Delivery)
        out.append(got)
    return out


async def test_every_event_sent_through_the_pipeline_has_its_attempt_committed_first(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = await Store.open(path)
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    await store.record(deliveries(1200))
    up = HttpUpstream(UP, "http://unused", batch_size=50, read_size=100, backoff=Backoff(0.05, 0.1))
    checked: list[tuple[int, int]] = []  # (outbox id, attempt) of every event at the moment it was sent
    wrong: list[str] = []
    refused: list[bool] = []
    spy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        async with Receiver() as rx:
            sink = build_sink(HttpUpstream(UP, rx.url, batch_size=50, read_size=100), site=SITE, gateway=GW)
            publish = sink.publish

            async def checked_publish(events: Sequence[Event]) -> list[SendOutcome]:
                for e in events:
                    attempt = json.loads(e.body)["attempt"]
                    row = spy.execute(
                        "SELECT state, attempts FROM outbox WHERE outbox_id = ?", (e.outbox_id,)
                    )
                    state, committed = row.fetchone()
                    if state != "pending" or committed != attempt:
                        wrong.append(f"row {e.outbox_id}: {state}, attempts {committed}, sent as {attempt}")
                    checked.append((e.outbox_id, attempt))
                if len(checked) >= 400 and not refused:  # refusals on the way, reads in flight
                    refused.append(True)
                    rx.fail(503, count=2)
                return await publish(events)

            sink.publish = checked_publish  # type: ignore[method-assign]
            fwd = Forwarder(store, sink, up, site=SITE, gateway=GW, idle_poll_s=0.05)
            stop = asyncio.Event()
            run = asyncio.create_task(fwd.run(stop, drain_s=1.0))
            async with asyncio.timeout(30):
                while fwd.state.delivered < 1200 + 3:  # + one BootObserved per device
                    await asyncio.sleep(0.02)
            stop.set()
            await run
            await sink.close()
    finally:
        spy.close()
    rows = await store.db.execute_fetchall("SELECT state, count(*) FROM outbox GROUP BY state")
    await store.close()
    assert wrong == []
    assert {r[0]: r[1] for r in rows} == {"delivered": 1203}
    assert {oid for oid, _ in checked} == set(range(1, 1204))
    assert refused and max(a for _, a in checked) >= 2  # rows went out again after the refusals, next attempt

"""A broker killed mid-stream (SIGKILL, then started again on the same port): every canonical
event stored reaches the independent host at least once, repeats carry the same canonicalId,
and every row ends delivered (spec sparkplug.md sections 5 and 6).

The agent's backoff (1.5 s) is longer than the host's reconnect (0.2 s), so the host is
subscribed again before the new births: Sparkplug data is QoS 0 with no session, and a host
that comes back later than its edge nodes misses what they sent before it subscribed; no
window can see that (docs/sparkplug.md says so)."""

from __future__ import annotations

import asyncio
import json

import pytest
from sparkplug_parts import Broker, Host, event_metrics
from sparkplug_scenario import delivery, needs_parts, settings, start

from agent.config.upstreams import Backoff
from agent.store.store import Store

pytestmark = [needs_parts(), pytest.mark.timeout(120)]

PER_TICK, TICK_S, TICKS_BETWEEN_KILLS = 10, 0.1, 8


def seen(host: Host) -> list[str]:
    msgs = host.messages("DDATA")
    return [m["properties"]["canonicalId"]["value"] for m in event_metrics(msgs, "Events/Transition")]


@pytest.mark.parametrize("kills", [3, pytest.param(20, marks=pytest.mark.slow)], ids=["3-kills", "20-kills"])
async def test_broker_killed_mid_stream_loses_nothing(
    broker: Broker, host: Host, sp_store: Store, kills: int
) -> None:
    up = settings(broker, keepalive_s=1.0, backoff=Backoff(1.5, 1.5))
    run = await start(sp_store, up, (("PUMP-07", ("Trip",)),))
    n = 0

    async def record(ticks: int) -> None:
        nonlocal n
        for _ in range(ticks):
            batch = []
            for _ in range(PER_TICK):
                n += 1
                batch.append(delivery("PUMP-07/Trip", n, "B17", "2026-04-22T08:00:00.000Z"))
            await sp_store.record(batch)
            await asyncio.sleep(TICK_S)

    try:
        await host.until(lambda e: e.get("verb") == "DBIRTH")
        for k in range(kills):
            async with asyncio.timeout(30):  # each kill hits a session that is up and streaming
                while run.forwarder.state.births < k + 1 or not run.forwarder.state.connected:
                    await asyncio.sleep(0.05)
            await record(TICKS_BETWEEN_KILLS)
            broker.kill()
            await record(3)  # the store keeps recording while the broker is gone
            broker.start()
        await record(TICKS_BETWEEN_KILLS)
        stored = [f"B17:{i}" for i in range(1, n + 1)]
        async with asyncio.timeout(60):
            while not set(stored) <= set(seen(host)) or run.forwarder.state.in_window:
                await asyncio.sleep(0.1)
        rows = list(await sp_store.db.execute_fetchall("SELECT state, count(*) FROM outbox GROUP BY state"))
        async with asyncio.timeout(30):  # the last window passes: every row delivered
            while dict(rows).get("pending"):
                await asyncio.sleep(0.2)
                rows = list(
                    await sp_store.db.execute_fetchall("SELECT state, count(*) FROM outbox GROUP BY state")
                )
    finally:
        await run.finish()
    ids = seen(host)
    lost = set(stored) - set(ids)
    births = [m["metrics"][0]["value"] for m in host.messages("NBIRTH")]
    print(
        json.dumps(
            {
                "broker_kills": kills,
                "events_stored": len(stored),
                "seen_by_host": len(set(ids)),
                "messages_with_repeats": len(ids),
                "lost": len(lost),
                "bdSeq_births": births,
            }
        )
    )
    assert not lost
    assert run.forwarder.state.births == kills + 1
    assert births[0] == 0 and births == sorted(set(births))  # bdSeq + 1 on every CONNECT
    assert all(i in stored for i in ids)  # repeats carry the same canonicalId: nothing else appears
    assert dict(rows) == {"delivered": n + 1}  # + the BootObserved of B17

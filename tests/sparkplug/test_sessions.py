"""The session rules against the independent host over a real Mosquitto: the primary host's
STATE gates births and data, the delivery window, rebirth on NCMD, bad commands, a PLC restart
(spec sparkplug.md sections 3, 5 and 6)."""

from __future__ import annotations

import asyncio
import json

import pytest
from sparkplug_parts import Broker, Host, event_metrics
from sparkplug_scenario import delivery, needs_parts, settings, start

from agent.core.contract import Anomaly, Delivery
from agent.core.intake import parse_delivery
from agent.store.store import Store

pytestmark = [needs_parts(), pytest.mark.timeout(90)]


async def until(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.05)


def ids(host: Host, since: int = 0) -> list[tuple[str, bool]]:
    """(canonicalId, is_historical) of every Events/Transition the host saw after event `since`."""
    msgs = [e for e in host.snapshot()[since:] if e["event"] == "message" and e["verb"] == "DDATA"]
    return [
        (m["properties"]["canonicalId"]["value"], m["isHistorical"])
        for m in event_metrics(msgs, "Events/Transition")
    ]


def ts(n: int) -> str:
    return f"2026-04-22T08:{n // 60:02d}:{n % 60:02d}.000Z"


async def delivered(store: Store) -> int:
    rows = list(await store.db.execute_fetchall("SELECT count(*) FROM outbox WHERE state = 'delivered'"))
    return int(rows[0][0])


async def test_primary_host_gates_births_history_then_live(broker: Broker, sp_store: Store) -> None:
    host = Host(broker.url, "plant-1", host_id="scada-1")
    try:
        host.send(cmd="state", online=False)
        await asyncio.sleep(0.3)
        await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(1, 11)])
        run = await start(sp_store, settings(broker, primary_host_id="scada-1"), (("PUMP-07", ("Trip",)),))
        try:
            await asyncio.sleep(1.5)
            assert host.messages() == []  # offline host: nothing published
            assert run.forwarder.state.primary_host_online is False
            await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(11, 16)])
            host.send(cmd="state", online=True)
            await until(lambda: len(ids(host)) == 15)
            verbs = [m["verb"] for m in host.messages()]
            assert verbs[:2] == ["NBIRTH", "DBIRTH"]
            # the backlog (everything recorded before the births) goes out oldest first, historical
            assert ids(host) == [(f"B17:{n}", True) for n in range(1, 16)]
            await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(16, 19)])
            await until(lambda: len(ids(host)) == 18)
            assert ids(host)[15:] == [(f"B17:{n}", False) for n in range(16, 19)]  # then live
            # offline: NDEATH, then silence while the store keeps recording
            mark = len(host.snapshot())
            host.send(cmd="state", online=False)
            await host.until(lambda e: e.get("verb") == "NDEATH")
            await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(19, 23)])
            await asyncio.sleep(1.0)
            after = [e["verb"] for e in host.snapshot()[mark:] if e["event"] == "message"]
            assert after == ["NDEATH"]
            # online again: births (bdSeq + 1), the rows of the broken window again (historical,
            # same canonicalId), then what was recorded meanwhile
            mark = len(host.snapshot())
            host.send(cmd="state", online=True)
            await until(lambda: len(ids(host, mark)) >= 22)
            births = [m for m in host.snapshot()[mark:] if m.get("verb") == "NBIRTH"]
            assert births[0]["metrics"][0]["value"] == 1  # bdSeq
            again = ids(host, mark)
            assert [i for i, _ in again] == [f"B17:{n}" for n in range(1, 23)]
            assert all(h for _, h in again)  # all were pending at the births
        finally:
            await run.finish()
        assert await delivered(sp_store) == 0  # keepalive 2 s: W = 4 s never passed unbroken
    finally:
        host.close()


async def test_a_sparkplug_2_2_host_gates_births_only_with_state_v22(broker: Broker, sp_store: Store) -> None:
    host = Host(broker.url, "plant-1", host_id="scada-22", v22=True)
    try:
        host.send(cmd="state22", online=False)
        await asyncio.sleep(0.3)
        await sp_store.record([delivery("PUMP-07/Trip", 1, "B17", ts(1))])
        up = settings(broker, primary_host_id="scada-22", state_v22=True)
        run = await start(sp_store, up, (("PUMP-07", ("Trip",)),))
        try:
            await asyncio.sleep(1.0)
            assert host.messages() == [] and run.forwarder.state.primary_host_online is False
            host.send(cmd="state22", online=True)
            await until(lambda: len(ids(host)) == 1)
            assert [m["verb"] for m in host.messages()][:2] == ["NBIRTH", "DBIRTH"]
        finally:
            await run.finish()
    finally:
        host.close()


async def test_window_then_delivered_and_rebirth_resends(broker: Broker, host: Host, sp_store: Store) -> None:
    run = await start(sp_store, settings(broker, keepalive_s=1.0), (("PUMP-07", ("Trip",)),))
    try:
        await until(lambda: len(host.messages("DBIRTH")) == 1)
        await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(1, 6)])
        await until(lambda: len(ids(host)) == 5)
        assert run.forwarder.state.in_window == 6  # 5 transitions + the BootObserved of B17
        assert await delivered(sp_store) == 0
        await until(lambda: run.forwarder.state.delivered == 6, timeout=10)  # W = 2 s passed unbroken
        assert await delivered(sp_store) == 6
        await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(6, 9)])
        await until(lambda: len(ids(host)) == 8)
        mark = len(host.snapshot())
        host.send(cmd="rebirth", node="gw-line3")
        await until(lambda: len(ids(host, mark)) == 3)
        after = [m for m in host.snapshot()[mark:] if m["event"] == "message"]
        assert [m["verb"] for m in after[:2]] == ["NBIRTH", "DBIRTH"]
        assert after[0]["seq"] == 0 and after[0]["metrics"][0]["value"] == 0  # same connection: same bdSeq
        assert ids(host, mark) == [(f"B17:{n}", True) for n in range(6, 9)]  # the broken window, again
        assert run.forwarder.state.rebirths == 1
        await until(lambda: run.forwarder.state.delivered == 9, timeout=10)
    finally:
        await run.finish()


async def test_bad_commands_are_ignored_and_nothing_is_lost(
    broker: Broker, host: Host, sp_store: Store
) -> None:
    run = await start(sp_store, settings(broker), (("PUMP-07", ("Trip",)),))
    try:
        await until(lambda: len(host.messages("DBIRTH")) == 1)
        host.send(cmd="raw", topic="spBv1.0/plant-1/NCMD/gw-line3", hex="ffffffff0102")
        host.send(
            cmd="ncmd",
            node="gw-line3",
            metrics=[{"name": "Node Control/Reboot", "type": "Boolean", "value": True}],
        )
        await host.until(lambda e: e.get("event") == "sent", count=2)
        await sp_store.record([delivery("PUMP-07/Trip", n, "B17", ts(n)) for n in range(1, 21)])
        await until(lambda: len(ids(host)) == 20)
        assert ids(host) == [(f"B17:{n}", False) for n in range(1, 21)]
        assert len(host.messages("NBIRTH")) == 1  # neither asked for a rebirth
        assert run.forwarder.state.bad_commands == 1
        assert run.forwarder.state.rebirths == 0
    finally:
        await run.finish()


async def test_plc_restart_gives_boot_observed_and_the_new_boot_id(
    broker: Broker, host: Host, sp_store: Store
) -> None:
    await sp_store.record([delivery("PUMP-07/Trip", 1, "B17", ts(1))])
    run = await start(sp_store, settings(broker), (("PUMP-07", ("Trip",)),))
    try:
        await until(lambda: len(ids(host)) == 1)
        await sp_store.record([delivery("PUMP-07/Trip", 1, "B18", ts(5))])  # counter restarted with the PLC
        await until(lambda: len(ids(host)) == 2)
        data = host.messages("DDATA")
        boots = event_metrics(data, "Events/BootObserved")
        assert [b["properties"]["canonicalId"]["value"] for b in boots] == ["B17", "B18"]
        assert '"previousBootId":"B17"' in boots[-1]["value"]
        assert boots[-1]["properties"]["transitionId"]["value"] is None  # a boot has none: is_null
        assert [m["value"] for m in event_metrics(data, "Device Info/Boot Id")] == ["B17", "B18"]
        assert ids(host)[-1] == ("B18:1", False)
        # a gap, a reset and an identity-incomplete record: their own event metrics, nothing made up
        gap = Anomaly("PUMP-07/Trip", "B18", "gap", "2", "4", "2026-04-22T08:00:09.000Z")
        reset = Anomaly("PUMP-07/Trip", "B18", "reset", "9", "1", "2026-04-22T08:00:10.000Z")
        incomplete = parse_delivery(
            json.dumps({"source": "PUMP-07/Trip", "transitionId": "T7", "payload": {"state": "x"}}),
            arrival_at="2026-04-22T08:00:11.000Z",
            receiver="test",
        )
        assert isinstance(incomplete, Delivery)
        await sp_store.record([incomplete], anomalies=[gap, reset])
        await until(
            lambda: all(
                event_metrics(host.messages("DDATA"), n)
                for n in ("Events/Gap", "Events/Anomaly", "Events/IdentityIncomplete")
            )
        )
        data = host.messages("DDATA")
        (g,) = event_metrics(data, "Events/Gap")
        assert g["properties"]["canonicalId"]["value"] == "gap:B18:2:4" and '"kind":"gap"' in g["value"]
        assert g["timestamp"] == 1776844809000
        (a,) = event_metrics(data, "Events/Anomaly")
        assert a["properties"]["canonicalId"]["value"] == "reset:B18:9:1"
        (i,) = event_metrics(data, "Events/IdentityIncomplete")
        assert i["properties"]["bootId"]["value"] is None  # unknown: is_null, never made up
        assert i["properties"]["transitionId"]["value"] == "T7"
        assert i["properties"]["sourceTimestamp"]["value"] is None  # its time is the arrival's
        assert i["timestamp"] == 1776844811000
        assert i["device"] == "PUMP-07" and i["declared"]
    finally:
        await run.finish()

"""The OPC UA simulator (inside a Plant, so Modbus serves the same controller) read with plain asyncua.

One plant per module: asyncua's ``Server.init()`` takes ~2 s. Tests mutate the shared
controller and compare what the server shows with the model, so their order does not matter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio
from asyncua import Client, ua
from pymodbus.client import AsyncModbusTcpClient

from devices.controller import ChannelSpec, Controller, ManualClock
from devices.opcua_nodes import NAMESPACE
from devices.plant import Plant

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(30)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def plant() -> AsyncIterator[Plant]:
    ctrl = Controller(
        "PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Level", counter_bits=16)], clock=ManualClock()
    )
    async with Plant([ctrl]) as p:
        yield p


@pytest_asyncio.fixture(loop_scope="module")
async def client(plant: Plant) -> AsyncIterator[Any]:
    assert plant.opcua is not None
    c = Client(plant.opcua.endpoint, timeout=3)
    await c.connect()
    yield c
    await c.disconnect()


def ms(dt: datetime) -> int:
    return round(dt.replace(tzinfo=dt.tzinfo or UTC).timestamp() * 1000)


async def read(client: Any, *sids: str) -> list[Any]:
    idx = await client.get_namespace_index(NAMESPACE)
    dvs = await client.read_attributes([client.get_node(f"ns={idx};s={sid}") for sid in sids])
    assert all(dv.StatusCode.is_good() for dv in dvs), [dv.StatusCode for dv in dvs]
    return list(dvs)


async def test_channel_nodes_match_the_model_with_its_source_timestamps(plant: Plant, client: Any) -> None:
    pump = plant.controllers["PUMP-07"]
    pump.clock.advance(1500)  # type: ignore[attr-defined]
    await plant.transition("PUMP-07", "Level", 1)
    boot, tid, state, stime = await read(
        client,
        "PUMP-07.BootId",
        "PUMP-07.Level.TransitionId",
        "PUMP-07.Level.State",
        "PUMP-07.Level.SourceTime",
    )
    live = pump.channel("Level")
    assert boot.Value.Value == pump.boot_id
    assert (tid.Value.Value, state.Value.Value, stime.Value.Value) == (
        live.transition_id,
        1,
        live.source_time_ms,
    )
    assert tid.Value.VariantType == ua.VariantType.UInt16
    assert {ms(dv.SourceTimestamp) for dv in (tid, state, stime)} == {live.source_time_ms}


async def test_ring_reads_in_one_call_and_matches_the_model(plant: Plant, client: Any) -> None:
    for _ in range(3):
        await plant.transition("PUMP-07", "Trip")
    names = ("Head", "Capacity", "Seq", "Channel", "State", "TransitionId", "BootId", "SourceTime")
    values = [dv.Value.Value for dv in await read(client, *(f"PUMP-07.Ring.{n}" for n in names))]
    pump = plant.controllers["PUMP-07"]
    head, cap, *columns = values
    assert (head, cap) == (pump.head, pump.ring_capacity)
    slots = [s for s in zip(*columns, strict=True) if s[0]]
    expected = [
        (e.seq, e.channel, e.state, e.transition_id, e.boot_id, e.source_time_ms)
        for e in pump.ring_slots()
        if e
    ]
    assert slots == expected


async def test_one_transition_is_the_same_over_both_paths(plant: Plant, client: Any) -> None:
    entry = await plant.transition("PUMP-07", "Trip")
    (tid,) = await read(client, "PUMP-07.Trip.TransitionId")
    mb = AsyncModbusTcpClient("127.0.0.1", port=plant.modbus["PUMP-07"].port, timeout=1, retries=0)
    assert await mb.connect()
    rr = await mb.read_holding_registers(10, count=2, device_id=1)
    mb.close()
    assert tid.Value.Value == entry.transition_id == (rr.registers[0] << 16 | rr.registers[1])


async def test_transitions_are_emitted_as_events_with_identity_fields(plant: Plant, client: Any) -> None:
    got: list[Any] = []

    class Handler:
        def event_notification(self, event: Any) -> None:
            got.append(event)

    idx = await client.get_namespace_index(NAMESPACE)
    sub = await client.create_subscription(20, Handler())
    await sub.subscribe_events(
        client.get_node(f"ns={idx};s=PUMP-07"), client.get_node(f"ns={idx};s=TransitionEventType")
    )
    first = await plant.transition("PUMP-07", "Trip")
    second = await plant.transition("PUMP-07", "Level", 2)
    for _ in range(50):
        if len(got) >= 2:
            break
        await asyncio.sleep(0.05)
    await sub.delete()
    fields = [(e.Channel, e.TransitionId, e.BootId, e.State, e.SourceTime) for e in got]
    assert fields == [
        ("Trip", first.transition_id, first.boot_id, first.state, first.source_time_ms),
        ("Level", second.transition_id, second.boot_id, 2, second.source_time_ms),
    ]


async def test_restart_changes_boot_id_and_start_time_and_resets_counters(plant: Plant) -> None:
    assert plant.opcua is not None
    await plant.transition("PUMP-07", "Trip")
    async with Client(plant.opcua.endpoint, timeout=3) as before:
        start1 = await before.get_node(ua.ObjectIds.Server_ServerStatus_StartTime).read_value()
        (boot1,) = await read(before, "PUMP-07.BootId")
    new_boot = await plant.restart("PUMP-07")
    async with Client(plant.opcua.endpoint, timeout=3) as after:
        start2 = await after.get_node(ua.ObjectIds.Server_ServerStatus_StartTime).read_value()
        boot2, tid = await read(after, "PUMP-07.BootId", "PUMP-07.Trip.TransitionId")
    assert start2 > start1
    assert boot2.Value.Value == new_boot == boot1.Value.Value + 1
    assert tid.Value.Value == 0


async def test_link_cut_refuses_connections_until_restored(plant: Plant) -> None:
    assert plant.opcua is not None
    await plant.cut_link("PUMP-07")
    try:
        with pytest.raises((ConnectionError, OSError, TimeoutError)):
            await Client(plant.opcua.endpoint, timeout=1).connect()
    finally:
        await plant.restore_link("PUMP-07")
    async with Client(plant.opcua.endpoint, timeout=3) as c:
        (boot,) = await read(c, "PUMP-07.BootId")
    assert boot.Value.Value == plant.controllers["PUMP-07"].boot_id

"""A Modbus poll that reads exactly the registers of the last one observes nothing, without
decoding them; any change, and any reconnect, is read and observed in full.

One real simulator on 127.0.0.1 and one `ModbusSource` polled by hand (no timers)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import loader as config
from agent.config.sources import Device
from agent.sources.modbus.answers import ExceptionResponse
from agent.sources.modbus.plan import Block
from agent.sources.modbus.poller import NOTHING, ModbusSource
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(30)
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


@pytest.fixture
async def plant() -> AsyncIterator[Plant]:
    async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as p:
        yield p


def device_of(plant: Plant, tmp_path: Path, **edit: Any) -> Device:
    entry = {**plant.device_configs()[0], **edit}
    doc = {"site": "plant-1", "gateway": "gw", "store": {"path": "unused.db"}, "devices": [entry]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config.load(path).devices[0]


def keys(obs: Any) -> list[tuple[str, str | None, str | None, bool]]:
    return [(d.source, d.transition_id, d.boot_id, d.live) for d in obs.deliveries]


async def test_the_same_registers_again_give_nothing_and_every_change_is_observed(
    plant: Plant, tmp_path: Path
) -> None:
    dev = device_of(plant, tmp_path)
    src = ModbusSource(dev, dev.connections[0])  # type: ignore[arg-type]
    await src.connect()
    try:
        first = await src.poll()  # the first read: ring included, boot seen
        assert first is not NOTHING and [b.boot_id for b in first.boots] == ["17"]
        assert await src.poll() is NOTHING
        assert await src.poll() is NOTHING

        await plant.transition("PUMP-07", "Trip")
        assert keys(await src.poll()) == [("PUMP-07/Trip", "1", "17", True)]
        assert await src.poll() is NOTHING

        for _ in range(3):  # the counter jumps by 3: the ring is read for T2, T3
            plant.controllers["PUMP-07"].transition("Trip")
        await plant.sync()
        jumped = await src.poll()
        assert sorted(keys(jumped)) == [
            ("PUMP-07/Trip", "2", "17", False),
            ("PUMP-07/Trip", "3", "17", False),
            ("PUMP-07/Trip", "4", "17", True),
        ]
        assert jumped.anomalies == ()
        assert await src.poll() is NOTHING

        await src.close()  # a reconnect may hide ring entries: read in full, ring included
        await src.connect()
        assert src.tracker.ring_due
        after = await src.poll()
        assert after is not NOTHING and not after and not src.tracker.ring_due
        assert await src.poll() is NOTHING
    finally:
        await src.close()


async def test_a_ring_that_cannot_be_read_is_asked_for_on_every_poll(plant: Plant, tmp_path: Path) -> None:
    ring = plant.device_configs()[0]["ring"]
    moved = 9000  # the ring mapped where the controller has nothing: every read of it is refused
    ring = {
        **ring,
        "head": {**ring["head"], "register": ring["head"]["register"] + moved},
        "capacity": {**ring["capacity"], "register": ring["capacity"]["register"] + moved},
        "slots": {**ring["slots"], "register": ring["slots"]["register"] + moved},
        "read": {**ring["read"], "register": ring["read"]["register"] + moved},
    }
    dev = device_of(plant, tmp_path, ring=ring)
    src = ModbusSource(dev, dev.connections[0])  # type: ignore[arg-type]
    await src.connect()
    try:
        for _ in range(3):
            obs = await src.poll()
            assert obs is not NOTHING  # never skipped while the ring read is due
            assert src.tracker.ring_due
        assert "exception 2" in str(src.errors.states.get("ring"))
    finally:
        await src.close()


async def test_an_unchanged_answer_costs_one_request_and_a_refusal_still_reads_channel_by_channel(
    plant: Plant, tmp_path: Path
) -> None:
    dev = device_of(plant, tmp_path)
    src = ModbusSource(dev, dev.connections[0])  # type: ignore[arg-type]
    assert src._one is not None and src.plan.blocks == (src._one,)  # boot id and fields: one request
    asked: list[Block] = []
    refuse: set[Block] = set()
    real = src.read_block

    async def counted(block: Block) -> list[int]:
        asked.append(block)
        if block in refuse:
            raise ExceptionResponse(block, 4)
        return await real(block)

    src.read_block = counted  # type: ignore[method-assign]
    await src.connect()
    try:
        assert await src.poll() is not NOTHING  # the first read: ring included
        assert await src.poll() is NOTHING  # settled: the registers are kept
        asked.clear()
        assert await src.poll() is NOTHING
        assert asked == [src._one]  # one request, then a comparison: nothing else read

        # A refusal on that request reads the boot id and each channel on their own, as before.
        refuse.add(src._one)
        asked.clear()
        await plant.transition("PUMP-07", "Trip")
        obs = await src.poll()
        assert asked[0] == src._one and len(asked) > 1 and src._one not in asked[1:]
        assert keys(obs) == [("PUMP-07/Trip", "1", "17", True)]
        assert "exception 4" in str(src.errors.states.get("read"))
        assert "reading channel by channel" in str(src.errors.states.get("read"))
    finally:
        await src.close()

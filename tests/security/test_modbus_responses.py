"""Modbus: the agent only reads (function codes 1-4), and answers are checked (quantity, unit,
function) against a hostile server on 127.0.0.1 and the simulator."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from agent.config import loader as config
from agent.config.sources import Channel, Device, Field, ModbusTcp
from agent.core.errors import SourceUnavailable
from agent.core.snapshot import Observations
from agent.sources.modbus.poller import ModbusSource
from devices.controller import ChannelSpec, Controller
from devices.hostile_modbus import HostileModbusServer
from devices.plant import Plant

pytestmark = pytest.mark.timeout(30)
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def device(port: int) -> Device:
    trip = Channel(
        "Trip", Field(register=10, type="uint32"), Field(register=12, values={0: "Normal", 1: "Trip"})
    )
    return Device(
        "PUMP-07",
        (ModbusTcp("127.0.0.1", port=port, timeout=0.5),),
        (trip,),
        boot_id=Field(register=0, type="uint32"),
    )


async def poll_once(mode: str) -> tuple[Observations | SourceUnavailable, ModbusSource, set[int]]:
    server = HostileModbusServer(mode)
    await server.start()
    dev = device(server.port)
    src = ModbusSource(dev, dev.connections[0])  # type: ignore[arg-type]
    try:
        await src.connect()
        try:
            return await src.poll(), src, server.function_codes
        except SourceUnavailable as exc:
            return exc, src, server.function_codes
    finally:
        await src.close()
        await server.stop()


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        pytest.param(
            "short", "registers for 13 asked", id="an answer with fewer registers than asked is refused"
        ),
        pytest.param(
            "long", "15 registers for 13 asked", id="an answer with more registers than asked is refused"
        ),
        pytest.param(
            "function", "function code 4 in the answer", id="an answer for another function is refused"
        ),
        pytest.param("odd", "registers for 13 asked", id="an odd byte count is refused"),
        pytest.param("unit", "unit id 2 in the answer, 1 asked", id="an answer from another unit is dropped"),
    ],
)
async def test_an_answer_that_does_not_answer_the_request_is_refused_without_a_crash(
    mode: str, error: str
) -> None:
    result, src, codes = await poll_once(mode)
    if isinstance(result, SourceUnavailable):
        assert error in str(result)  # another unit's answer: the stream is not trusted
    else:
        assert result.deliveries == ()  # nothing is made of a bad answer
        states = " ".join(v for v in src.errors.states.values() if v)
        assert "bad response" in states and error in states, states
    assert codes <= {1, 2, 3, 4}


async def test_a_correct_answer_from_the_same_server_is_delivered() -> None:
    result, _, codes = await poll_once("ok")
    assert isinstance(result, Observations)
    assert [(d.source, d.transition_id, d.boot_id) for d in result.deliveries] == [
        ("PUMP-07/Trip", str(0x10001), str(0x10001))
    ]
    assert codes == {3}


@pytest.fixture
async def plant() -> AsyncIterator[Plant]:
    async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as p:
        yield p


async def test_against_the_simulator_the_agent_sends_only_read_function_codes(
    plant: Plant, tmp_path: Path
) -> None:
    await plant.transition("PUMP-07", "Trip")
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": "unused.db"},
        "devices": plant.device_configs(),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    dev = config.load(path).devices[0]  # the simulator's own snippet through the real loader
    src = ModbusSource(dev, dev.connections[0])  # type: ignore[arg-type]
    try:
        await src.connect()
        await src.poll()
        await src.probe()
    finally:
        await src.close()
    server = plant.modbus["PUMP-07"]
    assert server.function_codes and server.function_codes <= {1, 2, 3, 4}

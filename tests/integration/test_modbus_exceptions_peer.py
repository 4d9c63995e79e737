"""Modbus exception answers from a stack no one here wrote: npm modbus-serial's TCP server (issue 28).

A Modbus TCP-to-RTU gateway answers 0x0B (gateway target device failed to respond) when the PLC
behind it is silent and 0x0A (gateway path unavailable) when it has no route to the unit id:
the device is then unavailable as a whole (the link state, backoff, logged once, `status`), and
it recovers by itself. A PLC answers 0x02 (illegal data address) for an unmapped register: that
channel is misconfigured (a per-channel error with its meaning, logged once, in `status`), the
other channels are still read. The server is ``peers/node/modbus_tcp_server.js``, serving a
devices/ controller's register map; it skips with the reason without Node.js or ``peers/node``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from agent.core.live import ServiceLive
from devices.controller import ChannelSpec, Controller
from devices.peers import node_missing
from devices.peers.modbus_peers import ModbusSerialTcp
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)

TRIP, OVERLOAD = "PUMP-07/Trip", "PUMP-07/Overload"


@pytest_asyncio.fixture
async def peer(devices_of: Callable[..., Any]) -> AsyncIterator[tuple[Controller, ModbusSerialTcp, Any]]:
    if (why := node_missing("modbus-serial")) is not None:
        pytest.skip(why)
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Overload")])
    server = ModbusSerialTcp(ctrl)
    await server.start()

    def to_peer(entry: dict[str, Any]) -> None:
        entry["connections"] = [
            {"modbus": {"host": "127.0.0.1", "port": server.port, "unit": 1, "timeout": "500ms"}}
        ]
        entry["poll"] = "50ms"
        entry["backoff"] = {"initial": "100ms", "max": "300ms"}
        entry.pop("ring", None)

    try:
        yield ctrl, server, devices_of(Plant([ctrl], opcua_port=None), to_peer)
    finally:
        await server.stop()


def has(view: Any, *wanted: tuple[str, str, str]) -> Callable[[], Any]:
    async def check() -> bool:
        return set(wanted) <= await view.keys()

    return check


@pytest.mark.parametrize(
    ("code", "meaning"),
    [
        pytest.param(
            11, "the device behind the gateway did not answer it", id="0x0B target failed to respond"
        ),
        pytest.param(10, "the gateway has no path to this unit id", id="0x0A gateway path unavailable"),
    ],
)
async def test_a_gateway_exception_marks_the_device_unavailable_with_its_meaning_until_it_recovers(
    peer: Any, agent_for: Any, wait_until: Any, caplog: pytest.LogCaptureFixture, code: int, meaning: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.sources.base")
    _, server, devices = peer
    live = ServiceLive(started_at="2026-04-22T08:00:00.000Z", pid=1, config="c.yaml")
    async with agent_for(devices, live=live) as view:
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "17")))
        await server.add_exception(0, 65535, code)  # the PLC behind the gateway is gone

        def said(level: int) -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.levelno >= level and f"exception {code}" in r.getMessage()
            ]

        async def retried() -> bool:
            return len(said(logging.DEBUG)) >= 3

        await wait_until(retried)
        [conn] = live.connections
        assert conn.state == "unavailable" and f"exception {code}" in str(conn.last_error)
        assert meaning in str(conn.last_error)
        await server.clear()  # back: it recovers by itself, and what happened meanwhile is read
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "2", "17")))
        assert conn.state == "up"
        assert await view.keys() == {(TRIP, "1", "17"), (TRIP, "2", "17")}
    assert len(said(logging.INFO)) == 1 and meaning in said(logging.INFO)[0]


async def test_an_unmapped_register_is_a_misconfigured_channel_the_others_still_read(
    peer: Any, agent_for: Any, wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.sources.modbus.poller")
    _, server, devices = peer
    overload = devices[0].channels[1].transition_id
    live = ServiceLive(started_at="2026-04-22T08:00:00.000Z", pid=1, config="c.yaml")
    async with agent_for(devices, live=live) as view:
        await server.add_exception(overload.register, 1, 2)  # Overload's counter: not mapped
        for t in ("1", "2"):  # polls in between: seen again, not said again
            await server.transition("Trip")
            await server.transition("Overload")
            await wait_until(has(view, (TRIP, t, "17")))
        assert {k[0] for k in await view.keys()} == {TRIP}
        [conn] = live.connections
        assert conn.state == "up"
        assert "exception 2 (illegal data address)" in conn.problems["channel Overload"]
        assert "check the register map" in conn.problems["channel Overload"]
    said = [
        r.getMessage()
        for r in caplog.records
        if "channel Overload" in r.getMessage() and "exception 2" in r.getMessage()
    ]
    assert len(said) == 1

"""Modbus RTU against an independent stack: libmodbus on a serial line made by socat (issue 28).

The agent's RTU client is pymodbus; until now it was tested only against pymodbus' own server.
Here the PLC is ``peers/libmodbus/rtu_server.c`` (compiled by the fixture against Debian's
``libmodbus-dev``), serving a devices/ controller's register map on one end of a socat pty
pair; the real poller opens the other end at 19200 8N1 or 9600 8N2 (a pty carries bytes only:
the settings are configured on both ends, the line is not simulated electrically). 8E1 cannot
run over a pty: Linux refuses parity on a pty (``tcsetattr``: EINVAL), on either end; what is
tested for it is that the agent says so as an unavailable link instead of failing its task. Poller
scenarios P1-P6 (../shared/acceptance/poller-scenarios.md) run over it. A
line that garbles answers (wrong CRC) or drops their tail: counted by the server, each such
read fails and is retried on the next poll, nothing decoded from it.

Skips with the reason without socat, a C compiler, pkg-config or libmodbus-dev.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from devices.controller import ChannelSpec, Controller
from devices.peers.modbus_peers import LibmodbusRtu, PtyPair, build_rtu_server, libmodbus_missing
from devices.plant import Plant

pytestmark = pytest.mark.timeout(90)

TRIP = "PUMP-07/Trip"
LINES = [
    pytest.param((19200, "N", 1), id="19200 8N1"),
    pytest.param((9600, "N", 2), id="9600 8N2"),
]


@pytest.fixture(scope="session")
def rtu_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (why := libmodbus_missing()) is not None:
        pytest.skip(why)
    return build_rtu_server(tmp_path_factory.getbasetemp().parent / "libmodbus-peer")


@pytest_asyncio.fixture
async def rtu(
    rtu_binary: Path, tmp_path: Path, request: pytest.FixtureRequest, devices_of: Callable[..., Any]
) -> AsyncIterator[Any]:
    """``rtu(controller, ring=True)`` -> (libmodbus server, the agent's devices over RTU)."""
    baud, parity, stopbits = request.param
    started: list[Any] = []

    async def make(ctrl: Controller, ring: bool = True) -> tuple[LibmodbusRtu, Any]:
        line = PtyPair(tmp_path)
        await line.start()
        started.append(line)
        server = LibmodbusRtu(ctrl, rtu_binary, line, baud, parity, stopbits)
        await server.start()
        started.append(server)

        def over_rtu(entry: dict[str, Any]) -> None:
            entry["connections"] = [
                {
                    "modbus_rtu": {
                        "serial": line.agent_end,
                        "baudrate": baud,
                        "parity": parity,
                        "stopbits": stopbits,
                        "unit": 1,
                        "timeout": "300ms",
                    }
                }
            ]
            entry["poll"] = "100ms"
            entry["backoff"] = {"initial": "100ms", "max": "300ms"}
            if not ring:
                entry.pop("ring", None)

        plant = Plant([ctrl], opcua_port=None)  # not started: only its config of the controller's map
        return server, devices_of(plant, over_rtu)

    try:
        yield make
    finally:
        for part in reversed(started):
            await part.stop()


def pump() -> Controller:
    return Controller("PUMP-07", [ChannelSpec("Trip")], ring_capacity=8)


async def keys(view: Any) -> set[tuple[str, str, str]]:
    return await view.keys()


def has(view: Any, *wanted: tuple[str, str, str]) -> Callable[[], Any]:
    async def check() -> bool:
        return set(wanted) <= await view.keys()

    return check


@pytest.mark.parametrize("rtu", LINES, indirect=True)
async def test_p1_p2_two_changes_then_a_restart_over_rtu(rtu: Any, agent_for: Any, wait_until: Any) -> None:
    ctrl = pump()
    server, devices = await rtu(ctrl)
    async with agent_for(devices) as view:
        for t in ("1", "2"):  # P1: slower than the poll
            await server.transition("Trip")
            await wait_until(has(view, (TRIP, t, "17")))
        ctrl.restart()  # P2: boot 18, the counter starts again
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "18")))
        assert await keys(view) == {(TRIP, "1", "17"), (TRIP, "2", "17"), (TRIP, "1", "18")}
        boots = await view.boots()
        assert [(b["bootId"], b["previous_bootId"]) for b in boots] == [("17", None), ("18", "17")]
        assert boots[1]["evidence"]["register"] == 0
        arrivals = await view.arrivals()
        assert {a["receiver"].split(":")[0] for a in arrivals} == {"modbus-rtu"}


@pytest.mark.parametrize("rtu", LINES, indirect=True)
async def test_p3_an_agent_restart_reads_the_same_values_again_as_duplicates_over_rtu(
    rtu: Any, agent_for: Any, wait_until: Any
) -> None:
    server, devices = await rtu(pump())
    async with agent_for(devices) as view:
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "17")))
        before = len(await view.arrivals())
    async with agent_for(devices) as view:  # the same store; nothing changed meanwhile

        async def read_again() -> bool:
            return len(await view.arrivals()) > before

        await wait_until(read_again)
        assert (await view.summary())["source_events"] == 1
        assert {a["decision"] for a in (await view.arrivals())[before:]} == {"duplicate"}


@pytest.mark.parametrize("rtu", LINES, indirect=True)
async def test_p4_p5_a_plc_that_stops_answering_then_its_ring_over_rtu(
    rtu: Any, agent_for: Any, wait_until: Any
) -> None:
    ctrl = pump()
    server, devices = await rtu(ctrl)
    async with agent_for(devices) as view:
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "17")))
        server.pause()  # unplugged: no answers, the poller times out and reconnects
        for _ in range(3):
            ctrl.transition("Trip")  # T2..T4 of boot 17, kept in the ring (P4)
        ctrl.restart()
        ctrl.transition("Trip")  # T1 of boot 18 (P5)
        server.resume()
        await server.sync()
        await wait_until(has(view, (TRIP, "1", "18"), (TRIP, "4", "17")))
        assert await keys(view) == {(TRIP, str(t), "17") for t in (1, 2, 3, 4)} | {(TRIP, "1", "18")}
        assert [(b["bootId"], b["previous_bootId"]) for b in await view.boots()] == [
            ("17", None),
            ("18", "17"),
        ]
        late = [
            a for a in await view.arrivals() if a["bootId"] == "17" and a["transitionId"] in ("2", "3", "4")
        ]
        assert late and all(not a["live"] for a in late)
        assert await view.anomalies(gaps=True) == []


@pytest.mark.parametrize("rtu", LINES, indirect=True)
async def test_p6_three_changes_within_one_poll_without_a_ring_over_rtu(
    rtu: Any, agent_for: Any, wait_until: Any
) -> None:
    ctrl = pump()
    server, devices = await rtu(ctrl, ring=False)
    async with agent_for(devices) as view:
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "17")))
        for _ in range(3):
            ctrl.transition("Trip")
        await server.sync()  # one write: the counter jumps from 1 to 4

        async def one_gap() -> bool:
            return len(await view.anomalies(gaps=True)) >= 1

        await wait_until(has(view, (TRIP, "4", "17")))
        await wait_until(one_gap)
        assert await keys(view) == {(TRIP, "1", "17"), (TRIP, "4", "17")}
        gaps = await view.anomalies(gaps=True)
        assert [(g["source"], g["bootId"], g["from"], g["to"]) for g in gaps] == [(TRIP, "17", "2", "3")]


@pytest.mark.parametrize("rtu", LINES[:1], indirect=True)
@pytest.mark.parametrize("fault", ["garble", "drop"])
async def test_answers_with_a_wrong_crc_or_a_lost_tail_are_counted_retried_and_never_decoded(
    rtu: Any, agent_for: Any, wait_until: Any, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    ctrl = pump()
    server, devices = await rtu(ctrl, ring=False)
    async with agent_for(devices) as view:
        await server.transition("Trip")
        await wait_until(has(view, (TRIP, "1", "17")))
        # The next three answers are spoiled, and carry every register one higher (the counter
        # 65,538): decoded, they would record a transition that never happened.
        await server.command(f"{fault} 3")

        async def spoiled() -> bool:
            _, garbled, dropped = await server.counts()
            return garbled + dropped >= 3

        await wait_until(spoiled)
        await server.transition("Trip")  # T2, answered cleanly once the line is good again
        await wait_until(has(view, (TRIP, "2", "17")))
        assert await keys(view) == {(TRIP, "1", "17"), (TRIP, "2", "17")}
        _, garbled, dropped = await server.counts()
        assert (garbled, dropped) == ((3, 0) if fault == "garble" else (0, 3))
    failures = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert failures  # the spoiled reads failed the link (said once per state), then it recovered
    assert any("recovered" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("rtu", [pytest.param((19200, "N", 1), id="19200 8N1")], indirect=True)
async def test_a_line_that_refuses_the_parity_is_an_unavailable_link_with_its_cause_not_a_crash(
    rtu: Any, agent_for: Any, wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.sources.base")
    _, devices = await rtu(pump())
    conn = devices[0].connections[0]
    devices = (replace(devices[0], connections=(replace(conn, parity="E"),)),)  # 8E1 on a pty

    def said(level: int) -> list[str]:
        return [
            r.getMessage() for r in caplog.records if r.levelno >= level and "serial line" in r.getMessage()
        ]

    async def retried() -> bool:
        return len(said(logging.DEBUG)) >= 3

    async with agent_for(devices):
        await wait_until(retried)  # the task lives on: it backs off and tries again
    first = said(logging.INFO)[0]  # the cause, named once; later attempts only fail to open it
    assert "8E1" in first and "Invalid argument" in first
    assert len(said(logging.INFO)) <= 2

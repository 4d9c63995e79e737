"""Modbus pollers against the devices/ simulators over real sockets, into a real SQLite store.

Each test follows one of the acceptance scenarios (P1..P14) and checks what the store holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)

TRIP = "PUMP-07/Trip"


def pump(**kwargs: Any) -> Controller:
    return Controller("PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Overload", counter_bits=16)], **kwargs)


def modbus_plant(*controllers: Controller) -> Plant:
    return Plant(list(controllers or [pump()]), opcua_port=None, poll="50ms")


async def test_a_restart_gives_one_boot_observed_with_register_evidence_and_new_events(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    async with modbus_plant() as plant, agent_for(devices_of(plant)) as view:
        for _ in range(2):
            await plant.transition("PUMP-07", "Trip")
            n = len(await view.events()) + 1
            await wait_until(lambda n=n: _count(view, n))
        await plant.restart("PUMP-07")
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "18")))
        assert await view.keys() == {(TRIP, "1", "17"), (TRIP, "2", "17"), (TRIP, "1", "18")}
        boots = await view.boots()
        assert [(b["bootId"], b["previous_bootId"]) for b in boots] == [("17", None), ("18", "17")]
        assert boots[1]["evidence"]["register"] == 0
        assert "changed from 17 to 18" in boots[1]["evidence"]["summary"]


async def test_a_link_cut_delivers_the_ring_entries_of_the_old_boot_under_the_old_boot_id(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    ctrl = pump()
    async with modbus_plant(ctrl) as plant, agent_for(devices_of(plant)) as view:
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        await plant.cut_link("PUMP-07")
        for _ in range(3):
            ctrl.transition("Trip")  # T2..T4 of boot 17, kept in the ring
        ctrl.restart()
        ctrl.transition("Trip")  # T1 of boot 18
        await plant.restore_link("PUMP-07")
        await wait_until(lambda: _has(view, (TRIP, "1", "18"), (TRIP, "4", "17")))
        assert await view.keys() == {(TRIP, str(t), "17") for t in (1, 2, 3, 4)} | {(TRIP, "1", "18")}
        assert [(b["bootId"], b["previous_bootId"]) for b in await view.boots()] == [
            ("17", None),
            ("18", "17"),
        ]
        late = [
            a for a in await view.arrivals() if a["bootId"] == "17" and a["transitionId"] in ("2", "3", "4")
        ]
        assert all(not a["live"] for a in late)
        assert await view.anomalies(gaps=True) == []


async def test_reading_again_after_an_agent_restart_gives_duplicates_not_new_events(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    async with modbus_plant() as plant:
        devices = devices_of(plant)
        async with agent_for(devices) as view:
            await plant.transition("PUMP-07", "Trip")
            await plant.transition("PUMP-07", "Overload")
            await wait_until(lambda: _count(view, 2))
            before = len(await view.arrivals())
        async with agent_for(devices) as view:
            await wait_until(lambda: _arrivals(view, before + 2))
            summary = await view.summary()
            assert summary["source_events"] == 2
            assert {a["decision"] for a in (await view.arrivals())[before:]} == {"duplicate"}


async def test_transitions_faster_than_polling_without_a_ring_record_a_gap_and_invent_nothing(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    ctrl = pump()
    async with modbus_plant(ctrl) as plant, agent_for(devices_of(plant, _without_ring)) as view:
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        for _ in range(3):
            ctrl.transition("Trip")
        await plant.sync()  # one write: the poller sees the counter jump from 1 to 4
        await wait_until(lambda: _has(view, (TRIP, "4", "17")))
        await wait_until(lambda: _gaps(view, 1))
        assert await view.keys() == {(TRIP, "1", "17"), (TRIP, "4", "17")}
        gaps = await view.anomalies(gaps=True)
        assert [(g["source"], g["bootId"], g["from"], g["to"]) for g in gaps] == [(TRIP, "17", "2", "3")]


async def test_a_ring_overwritten_during_a_cut_gives_its_entries_and_an_overrun_naming_the_lost_ones(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    ctrl = pump(ring_capacity=8)
    async with modbus_plant(ctrl) as plant, agent_for(devices_of(plant)) as view:
        await plant.transition("PUMP-07", "Trip")
        await wait_until(lambda: _has(view, (TRIP, "1", "17")))
        await plant.cut_link("PUMP-07")
        for _ in range(8 + 3):
            ctrl.transition("Trip")  # T2..T12; the ring keeps T5..T12
        await plant.restore_link("PUMP-07")
        await wait_until(lambda: _count(view, 9))
        await wait_until(lambda: _anomalies(view, 1))
        assert await view.keys() == {(TRIP, str(t), "17") for t in (1, *range(5, 13))}
        anomalies = await view.anomalies(gaps=False)
        assert [(a["kind"], a["from"], a["to"]) for a in anomalies] == [("overrun", "2", "4")]


@pytest.mark.parametrize(
    "boot_mapped",
    [
        pytest.param(False, id="a map without a boot id"),
        pytest.param(True, id="a boot id register that fails to read"),
    ],
)
async def test_a_device_without_a_readable_boot_id_yields_identity_incomplete_only(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any, boot_mapped: bool
) -> None:
    ctrl = pump(boot_id_mode="none")

    def edit(entry: dict[str, Any]) -> None:
        if boot_mapped:
            entry["boot_id"] = {"register": 0, "type": "uint32"}  # unmapped: exception 2

    async with modbus_plant(ctrl) as plant, agent_for(devices_of(plant, edit)) as view:
        await plant.transition("PUMP-07", "Trip")
        await plant.transition("PUMP-07", "Overload")
        await wait_until(lambda: _pending(view, 2))
        summary = await view.summary()
        assert (summary["source_events"], summary["boots"], summary["identity_incomplete"]) == (0, 0, 2)
        assert all(a["bootId"] is None for a in await view.arrivals())


async def test_a_half_open_plc_never_delays_the_others_and_is_reported_once(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.sources.base")  # DEBUG: repeated failures too
    ctrls = [Controller(f"PLC-{i}", [ChannelSpec("Trip")]) for i in range(10)]

    def down(level: int) -> list[logging.LogRecord]:
        said = [r for r in caplog.records if r.levelno >= level and "PLC-0" in r.getMessage()]
        return [r for r in said if "unavailable" in r.getMessage()]

    async def reconnected_again() -> bool:  # several timeouts and reconnects of PLC-0
        return len(down(logging.DEBUG)) >= 3

    def fast_timeout(entry: dict[str, Any]) -> None:
        entry["connections"][0]["modbus"]["timeout"] = "300ms"
        entry["backoff"] = {"initial": "100ms", "max": "400ms"}

    async with modbus_plant(*ctrls) as plant, agent_for(devices_of(plant, fast_timeout)) as view:
        plant.half_open("PLC-0")
        for round_ in range(1, 4):
            for c in ctrls[1:]:
                await plant.transition(c.name, "Trip")
            await wait_until(lambda r=round_: _count(view, 9 * r), timeout=5)
        await wait_until(reconnected_again)
        await plant.modbus["PLC-0"].restore_link()
        await plant.transition("PLC-0", "Trip")
        await wait_until(lambda: _has(view, ("PLC-0/Trip", "1", "17")))
    assert len(down(logging.INFO)) == 1


async def test_an_exception_response_for_one_channel_leaves_the_others_read_and_is_logged_once(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.sources.modbus.poller")
    # Without a ring: the ring would supply Overload's transitions, which hides what is tested here.
    async with modbus_plant() as plant, agent_for(devices_of(plant, _without_ring)) as view:
        plant.modbus["PUMP-07"].add_exception(18, 1)  # Overload's transition id
        for round_ in (1, 2):  # a poll between the rounds: the exception is seen again, not logged again
            await plant.transition("PUMP-07", "Trip")
            await plant.transition("PUMP-07", "Overload")
            await wait_until(lambda r=round_: _has(view, (TRIP, str(r), "17")))
        assert {k[0] for k in await view.keys()} == {TRIP}
    errors = [
        r for r in caplog.records if "channel Overload" in r.getMessage() and "exception 2" in r.getMessage()
    ]
    assert len(errors) == 1


async def test_a_16_bit_counter_wrap_is_an_anomaly_not_a_restart(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    ctrl = pump()
    ctrl.set_counter("Overload", 65534)
    async with modbus_plant(ctrl) as plant, agent_for(devices_of(plant, _without_ring)) as view:
        for expect in ("65535", "1"):
            await plant.transition("PUMP-07", "Overload")
            if expect == "1":
                await plant.transition("PUMP-07", "Overload")
            await wait_until(lambda e=expect: _has(view, ("PUMP-07/Overload", e, "17")))
        anomalies = await view.anomalies(gaps=False)
        assert [(a["kind"], a["to"]) for a in anomalies][-1][0] == "wrap"
        assert len(await view.boots()) == 1


# --- helpers -----------------------------------------------------------------------------------


def _without_ring(entry: dict[str, Any]) -> None:
    entry.pop("ring", None)


async def _count(view: Any, n: int) -> bool:
    return len(await view.events()) >= n


async def _arrivals(view: Any, n: int) -> bool:
    return len(await view.arrivals()) >= n


async def _pending(view: Any, n: int) -> bool:
    return (await view.summary())["identity_incomplete"] >= n


async def _gaps(view: Any, n: int) -> bool:
    return len(await view.anomalies(gaps=True)) >= n


async def _anomalies(view: Any, n: int) -> bool:
    return len(await view.anomalies(gaps=False)) >= n


async def _has(view: Any, *keys: tuple[str, str, str]) -> bool:
    return set(keys) <= await view.keys()

"""P17 with the simulators: a counter reset within one boot reuses a key with other content.

No cache in front of the store: T1 again (other state and source time) reaches the store,
which decides `conflict` (the canonical marked `DuplicateConflict`, both kept), and the reset
is an anomaly. Modbus and OPC UA, real simulators, real pollers, recorder and store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("protocol", ["modbus", "opcua"])
async def test_a_counter_reset_that_reuses_a_key_is_a_conflict_and_a_reset_anomaly(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any, protocol: str
) -> None:
    ctrl = Controller("PUMP-07", [ChannelSpec("Trip")])
    plant = Plant(
        [ctrl], modbus_port=0 if protocol == "modbus" else None, opcua_port=0 if protocol == "opcua" else None
    )

    def edit(entry: dict[str, Any]) -> None:
        entry.pop("ring", None)
        entry.pop("events", None)
        entry["poll"] = "100ms"

    async with plant, agent_for(devices_of(plant, edit)) as view:

        async def stored(tid: str) -> bool:
            return ("PUMP-07/Trip", tid, "17") in await view.keys()

        async def booted() -> bool:
            return bool(await view.boots())

        await wait_until(booted)  # read once before anything happens: T1..T3 are each seen
        for tid in ("1", "2", "3"):
            await plant.transition("PUMP-07", "Trip")
            await wait_until(lambda t=tid: stored(t))
        first = next(e for e in await view.events() if e["transitionId"] == "1")

        ctrl.set_counter("Trip", 0)  # the counter resets within boot 17 (no restart)
        await plant.sync()

        async def reset_seen() -> bool:
            return any(a["kind"] == "reset" for a in await view.anomalies(gaps=False))

        await wait_until(reset_seen)
        await plant.transition("PUMP-07", "Trip")  # T1 again, other state and source time

        async def conflicted() -> bool:
            return any(a["decision"] == "conflict" for a in await view.arrivals())

        await wait_until(conflicted)
        event = next(e for e in await view.events() if e["transitionId"] == "1")
        anomalies = await view.anomalies(gaps=False)
    assert (event["status"], event["conflict_count"]) == ("DuplicateConflict", 1)
    assert event["payload"] == first["payload"]  # the canonical keeps the first content
    assert [(a["kind"], a["from"], a["to"]) for a in anomalies] == [("reset", "3", "0")]

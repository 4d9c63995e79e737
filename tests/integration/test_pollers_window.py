"""Window keys against the real simulators: one PLC state without a counter, read over Modbus and
OPC UA (contract section 8). The table of every case is tests/store/test_window_table.py; this
pins that both pollers make the same key from a real controller."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agent.core.basis import WINDOW_KEY
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


def door_as_window(entry: dict[str, Any]) -> None:
    """``Door`` keeps only its state (as a coil or status word would) and opts in to window keys;
    ``Trip`` keeps its counter and tells the test when both paths have read the device."""
    channels = entry["channels"]
    channels["Door"] = {"identity": "window", "window": "365d", "state": channels["Door"]["state"]}
    for key in ("ring", "events"):
        entry.pop(key, None)


async def test_one_state_without_counter_read_over_both_paths_is_one_event_per_state_and_window(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    plc = Controller("PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Door", values={0: "Closed", 1: "Open"})])
    async with Plant([plc], poll="50ms") as plant, agent_for(devices_of(plant, door_as_window)) as view:
        await plant.transition("PUMP-07", "Trip")  # both paths deliver T1 once they have read the PLC
        await wait_until(lambda: _receivers(view, "PUMP-07/Trip", {"modbus", "opcua"}))
        for state in ("Open", "Closed", "Open"):  # the second Open is a real change inside the window
            n = len(await _of(view, "PUMP-07/Door")) + 2
            await plant.transition("PUMP-07", "Door")
            await wait_until(lambda n=n: _count(view, "PUMP-07/Door", n))
            latest = (await _of(view, "PUMP-07/Door"))[-2:]
            assert {a["transitionId"].split(":")[1] for a in latest} == {state}
        events = [e for e in await view.events() if e["source"] == "PUMP-07/Door"]
        arrivals = await _of(view, "PUMP-07/Door")
    assert [(e["transitionId"].rsplit(":", 1)[0], e["payload"], e["duplicate_count"]) for e in events] == [
        ("w:Open", {"state": "Open"}, 3),  # two paths x two real openings: one event (the pinned cost)
        ("w:Closed", {"state": "Closed"}, 1),
    ]
    assert all(e["identity_basis"] == "window" and e["flags"] == [WINDOW_KEY] for e in events)
    assert all(e["sourceTimestamp"] is None and e["conflict_count"] == 0 for e in events)
    assert sorted(a["decision"] for a in arrivals) == ["duplicate"] * 4 + ["inserted"] * 2
    assert all(WINDOW_KEY in a["flags"] and a["identity_basis"] == "window" for a in arrivals)
    assert {a["receiver"].split(":")[0] for a in arrivals} == {"modbus", "opcua"}
    window = json.loads(arrivals[0]["raw"])["window"]
    assert (window["ms"], window["observed_from"]) == (365 * 86_400_000, "read time")


async def _of(view: Any, source: str) -> list[dict[str, Any]]:
    return [a for a in await view.arrivals() if a["source"] == source]


async def _count(view: Any, source: str, n: int) -> bool:
    return len(await _of(view, source)) >= n


async def _receivers(view: Any, source: str, kinds: set[str]) -> bool:
    return {a["receiver"].split(":")[0] for a in await _of(view, source)} >= kinds


async def test_a_subscribed_opcua_connection_watches_the_state_node_of_a_window_channel(
    agent_for: Any, devices_of: Callable[..., Any], wait_until: Any
) -> None:
    def subscribed(entry: dict[str, Any]) -> None:
        door_as_window(entry)
        # The reconciling read comes only every 60 s: a change seen sooner was pushed by the subscription.
        entry["connections"][0]["opcua"].update({"subscribe": True, "reconcile": "60s", "timeout": "1s"})

    plc = Controller("PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Door", values={0: "Closed", 1: "Open"})])
    async with (
        Plant([plc], modbus_port=None, poll="50ms") as plant,
        agent_for(devices_of(plant, subscribed)) as view,
    ):
        await plant.transition("PUMP-07", "Trip")  # its counter is watched: the read after it is the baseline
        await wait_until(lambda: _count(view, "PUMP-07/Trip", 1))
        await plant.transition("PUMP-07", "Door")
        await wait_until(lambda: _count(view, "PUMP-07/Door", 1))
        door = await _of(view, "PUMP-07/Door")
    # The simulator's OPC UA-only map names no state values: the raw value stands in the key.
    assert [(a["transitionId"].rsplit(":", 1)[0], a["decision"]) for a in door] == [("w:1", "inserted")]

"""Window-key channels resume after an agent restart when the controller gives the change time
(issue 28): the first read after a start is a new event only when its change time is newer than
the latest source time the store holds for the channel; the same time is a re-read (a
``duplicate``); an older one is a baseline, never an event.

The real Modbus poller against the devices/ simulator, a real SQLite store, and the agent's
resume points read from that store the way ``edge-agent run`` reads them at start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store.reader import Reader
from agent.store.store import Store
from devices.controller import ChannelSpec, Controller, ManualClock
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)

DOOR = "PUMP-07/Door"


def door_with_change_time(entry: dict[str, Any]) -> None:
    """``Door`` keeps its state and its change time (no counter) and opts in to window keys."""
    door = entry["channels"]["Door"]
    entry["channels"]["Door"] = {
        "identity": "window",
        "window": "1h",
        "state": door["state"],
        "source_timestamp": door["source_timestamp"],
    }
    for key in ("ring", "events"):
        entry.pop(key, None)


@asynccontextmanager
async def agent(devices: Any, path: Path) -> AsyncIterator[Any]:
    """Pollers + recorder on ``path``, resumed from what the store holds (as `run` does)."""
    store = await Store.open(path)
    async with await Reader.open(str(path)) as reader:
        resume = await reader.resume_points([d.name for d in devices])
    recorder = Recorder(store)
    stop, stop_recorder = asyncio.Event(), asyncio.Event()
    rec = asyncio.create_task(recorder.run(stop_recorder))
    pollers = asyncio.create_task(run_pollers(devices, recorder, stop, resume=resume))
    try:
        yield store
    finally:
        stop.set()
        await pollers
        stop_recorder.set()
        await rec
        await store.close()


async def door_arrivals(store: Store) -> list[dict[str, Any]]:
    from agent.store import report

    async with store._lock:
        return [a async for a in report.arrivals(store.db) if a["source"] == DOOR]


async def test_a_window_channel_resumes_from_the_store_by_the_controllers_change_time(
    devices_of: Callable[..., Any], wait_until: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    clock = ManualClock()
    plc = Controller(
        "PUMP-07", [ChannelSpec("Trip"), ChannelSpec("Door", values={0: "Closed", 1: "Open"})], clock=clock
    )
    path = tmp_path / "store.db"
    async with Plant([plc], opcua_port=None, poll="50ms") as plant:
        devices = devices_of(plant, door_with_change_time)

        async def arrivals(n: int) -> list[dict[str, Any]]:
            async with agent(devices, path) as store:
                await wait_until(lambda: _count(store, n))
                await asyncio.sleep(0.3)  # a few more polls: nothing more may come
                return await door_arrivals(store)

        clock.advance(60_000)
        await plant.transition("PUMP-07", "Door")  # Open at 08:01
        first = await arrivals(1)
        assert [(a["decision"], a["sourceTimestamp"]) for a in first] == [
            ("inserted", "2026-04-22T08:01:00.000Z")
        ]

        # the agent restarts, nothing changed: the same change time, a re-read (duplicate)
        again = await arrivals(2)
        assert [a["decision"] for a in again] == ["inserted", "duplicate"]

        # the door closed while the agent was away, at a newer time: a new event
        clock.advance(60_000)
        await plant.transition("PUMP-07", "Door")  # Closed at 08:02
        later = await arrivals(3)
        assert [(a["decision"], a["transitionId"].split(":")[1]) for a in later][-1] == ("inserted", "Closed")

        # the controller's clock was set back and the door opened "at 07:59": older than the
        # store's last event of the channel, so no event, and the agent says why
        clock.advance(-180_000)
        await plant.transition("PUMP-07", "Door")
        async with agent(devices, path) as store:
            await asyncio.sleep(0.6)
            assert len(await door_arrivals(store)) == 3
    said = [r.getMessage() for r in caplog.records if "older than the last event" in r.getMessage()]
    assert said and "2026-04-22T07:59:00.000Z" in said[0]


async def _count(store: Store, n: int) -> bool:
    return len(await door_arrivals(store)) >= n

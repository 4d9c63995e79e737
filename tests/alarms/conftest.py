"""Fixtures for the alarm scenarios: the OPC UA simulator with alarm conditions, a cuttable TCP
link in front of it, the real pollers and recorder on a real SQLite file.

``rig`` starts one simulator (about 2 s: asyncua loads its address space) behind a
:class:`devices.link.CutLink`; ``rig.agent()`` runs the agent (pollers + recorder) on the rig's
store and can be entered again to model an agent that was down. Reads go through
``agent.store.report`` the way ``edge-agent report --json`` shows them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from agent.config import loader as config
from agent.config.sources import Device
from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store import report
from agent.store.store import Store
from devices.controller import ChannelSpec, Controller
from devices.link import CutLink
from devices.opcua_server import OpcUaSimServer

logging.getLogger("asyncua").setLevel(logging.CRITICAL)

PLC = "PLC-1"
HIGH = f"{PLC}/{PLC}.HighTemp"
LOW = f"{PLC}/{PLC}.LowLevel"


class View:
    """The store as `report --json` shows it, read on the recorder's connection under its lock."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def _all(self, gen: Any) -> list[dict[str, Any]]:
        async with self.store._lock:
            return [x async for x in gen]

    async def events(self) -> list[dict[str, Any]]:
        return await self._all(report.events(self.store.db))

    async def arrivals(self) -> list[dict[str, Any]]:
        return await self._all(report.arrivals(self.store.db))

    async def boots(self) -> list[dict[str, Any]]:
        return await self._all(report.boots(self.store.db))

    async def anomalies(self) -> list[dict[str, Any]]:
        gaps = await self._all(report.anomalies(self.store.db, gaps=True))
        return gaps + await self._all(report.anomalies(self.store.db, gaps=False))


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    """Wait until ``check`` holds (a hang backstop, not a performance check)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached before the backstop")
        await asyncio.sleep(0.05)


@dataclass
class Rig:
    server: OpcUaSimServer
    link: CutLink
    tmp: Path
    alarms: dict[str, Any] = field(default_factory=dict)

    def devices(self) -> tuple[Device, ...]:
        """The agent config, through the real loader: one alarms-only device behind the link."""
        entry = {
            "name": PLC,
            "poll": "100ms",
            "backoff": {"initial": "100ms", "max": "300ms"},
            "connections": [
                {
                    "opcua": {
                        "endpoint": f"opc.tcp://127.0.0.1:{self.link.port}/sim/",
                        "security": {"policy": "None"},
                        "timeout": "1s",
                        "publishing": "50ms",
                    }
                }
            ],
            "alarms": self.alarms,
        }
        doc = {"site": "plant-1", "gateway": "gw-test", "store": {"path": str(self.tmp / "s.db")}}
        doc["devices"] = [entry]
        path = self.tmp / f"config-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return config.load(path).devices

    @asynccontextmanager
    async def agent(self, db: str = "store.db") -> AsyncIterator[View]:
        """The agent running (pollers + recorder) on ``tmp/<db>``; leaving it stops the agent."""
        store = await Store.open(self.tmp / db)
        recorder = Recorder(store)
        stop, stop_recorder = asyncio.Event(), asyncio.Event()
        rec = asyncio.create_task(recorder.run(stop_recorder), name="recorder")
        pollers = asyncio.create_task(
            run_pollers(self.devices(), recorder, stop, alarm_memory=store.read_alarm_memory), name="pollers"
        )
        try:
            yield View(store)
        finally:
            stop.set()
            await pollers
            stop_recorder.set()
            await rec
            await store.close()

    async def alarm(self, condition: str, action: str) -> str:
        """One transition on the simulator; returns its EventId as the agent keys it (hex)."""
        ev = await self.server.alarm(PLC, condition, action)
        return ev.event_id.hex()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sim() -> AsyncIterator[tuple[OpcUaSimServer, CutLink]]:
    """One simulator per module (``Server.init`` costs ~2 s, more under load) and its link."""
    server = OpcUaSimServer([Controller(PLC, [ChannelSpec("Trip")])])
    await server.start()
    link = CutLink("127.0.0.1", server.port)
    await link.start()
    try:
        yield server, link
    finally:
        await link.stop()
        await server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def rig(
    sim: tuple[OpcUaSimServer, CutLink], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Rig]:
    """The shared simulator with no alarms; ``@pytest.mark.parametrize("rig", [{"event_ids":
    "counter"}], indirect=True)`` picks how it makes EventIds."""
    options: dict[str, Any] = getattr(request, "param", {})
    server, link = sim
    server.reset_alarms(options.get("event_ids", "unique"))
    link.restore()
    yield Rig(server, link, tmp_path)


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[None]]:
    return eventually

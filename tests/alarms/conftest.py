"""Fixtures for the alarm scenarios: an OPC UA server with alarm conditions, a cuttable TCP
link in front of it, the real pollers and recorder on a real SQLite file.

``sim`` is one server per module and stack (``alarm_peers``): the project's asyncua simulator
(about 2 s to start), polled with ``subscribe: false``, and node-opcua 2.186.4 (2-6 s), with
``subscribe: true`` as ``config.example.yaml`` has it (the combination that never connected before
issue 28). node-opcua skips with the reason when Node.js or ``peers/node`` is missing.
``rig.agent()`` runs the agent (pollers + recorder) on the rig's store and can be entered again
to model an agent that was down. Reads go through ``agent.store.report`` the way
``edge-agent report --json`` shows them.
"""

from __future__ import annotations

import asyncio
import logging
import sys
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
from agent.core.live import ServiceLive
from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store import report
from agent.store.store import Store
from devices.link import CutLink
from devices.peers import node_missing

sys.path.insert(0, str(Path(__file__).resolve().parent))  # alarm_peers.py is a sibling file
from alarm_peers import AlarmPeer, NodeOpcUaPeer, SimulatorPeer

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


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Wait until ``check`` holds (a hang backstop, not a performance check)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached before the backstop")
        await asyncio.sleep(0.05)


@dataclass
class Rig:
    peer: AlarmPeer
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
                        "subscribe": self.peer.name == "node-opcua",
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
    async def agent(self, db: str = "store.db", live: ServiceLive | None = None) -> AsyncIterator[View]:
        """The agent running (pollers + recorder) on ``tmp/<db>``; leaving it stops the agent.
        ``live`` collects what ``status`` shows of the connection."""
        store = await Store.open(self.tmp / db)
        recorder = Recorder(store)
        stop, stop_recorder = asyncio.Event(), asyncio.Event()
        rec = asyncio.create_task(recorder.run(stop_recorder), name="recorder")
        pollers = asyncio.create_task(
            run_pollers(self.devices(), recorder, stop, live, alarm_memory=store.read_alarm_memory),
            name="pollers",
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
        """One transition on the server; returns its EventId as the agent keys it (hex)."""
        return await self.peer.alarm(condition, action)


STACKS = ["simulator", "node-opcua"]


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=STACKS)
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[tuple[AlarmPeer, CutLink]]:
    """One server per module and stack (start-up costs 2-6 s under load) and its link."""
    if request.param == "node-opcua" and (why := node_missing()) is not None:
        pytest.skip(why)
    peer: AlarmPeer = SimulatorPeer() if request.param == "simulator" else NodeOpcUaPeer()
    await peer.start()
    link = CutLink("127.0.0.1", peer.port)
    await link.start()
    try:
        yield peer, link
    finally:
        await link.stop()
        await peer.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def rig(
    sim: tuple[AlarmPeer, CutLink], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Rig]:
    """The shared server with no alarms; ``@pytest.mark.parametrize("rig", [{"event_ids":
    "counter"}], indirect=True)`` picks how it makes EventIds (the simulator only)."""
    options: dict[str, Any] = getattr(request, "param", {})
    peer, link = sim
    event_ids = options.get("event_ids", "unique")
    if event_ids != "unique" and peer.name != "simulator":
        pytest.skip(f"{peer.name} makes its own EventIds and never reuses one")
    await peer.reset(event_ids)
    link.restore()
    yield Rig(peer, link, tmp_path)


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[None]]:
    return eventually

"""The OPC UA poller against node-opcua 2.186.4 (issue 28): transitions on a server no one here wrote.

``peers/node/opcua_server.js`` (the subscription bench's server) serves the node layout of
devices/opcua_nodes.py for one controller (boot id 17, channel Trip, a ring of 8, one
TransitionEventType event per transition). The real OPC UA source reads it with plain polled
reads and with subscriptions plus reconcile; three transitions in one write (P6 with a ring:
the ring supplies what the counter skipped) and three more one by one must all be recorded,
nothing named missing. One node-opcua server per test (start-up 2-6 s). Skips with the reason
without Node.js or ``peers/node``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from agent.config import loader as config
from devices.agent_config import device_config
from devices.controller import ChannelSpec, Controller
from devices.opcua_nodes import NodeLayout
from devices.peers import NODE_DIR, node_missing

pytestmark = pytest.mark.timeout(90)

NAME = "PLC-UA"
TRIP = f"{NAME}/Trip"


class NodeServer:
    def __init__(self, proc: asyncio.subprocess.Process, endpoint: str) -> None:
        self.proc, self.endpoint = proc, endpoint

    async def burst(self, n: int, chunk: int) -> None:
        """``n`` transitions, ``chunk`` per write of the nodes; returns when the server made them."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"burst {n} 0 {chunk}\n".encode())
        await self.proc.stdin.drain()
        while not (await self.proc.stdout.readline()).startswith(b"DONE "):
            pass


@pytest_asyncio.fixture
async def node_server(tmp_path: Path) -> AsyncIterator[NodeServer]:
    if (why := node_missing()) is not None:
        pytest.skip(why)
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_DIR / "opcua_server.js"),
        NAME,
        "8",
        str(tmp_path / "pki"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while not (line := (await proc.stdout.readline()).decode()).startswith("READY "):
            assert line, "the node-opcua server ended before it was ready"
    try:
        yield NodeServer(proc, json.loads(line[6:])["endpoint"])
    finally:
        proc.kill()
        await proc.wait()


@pytest.mark.parametrize("subscribe", [False, True], ids=["polled reads", "subscription with reconcile"])
async def test_transitions_on_node_opcua_are_all_recorded_polled_or_subscribed(
    node_server: NodeServer,
    agent_for: Any,
    wait_until: Any,
    subscribe: bool,
    tmp_path: Path,
) -> None:
    ctrl = Controller(NAME, [ChannelSpec("Trip")], ring_capacity=8)
    opcua = {"endpoint": node_server.endpoint, "security": {"policy": "None"}, "subscribe": subscribe}
    entry = device_config(ctrl, opcua=opcua, nodes=NodeLayout(ctrl), poll="100ms")
    if subscribe:
        entry["connections"][0]["opcua"]["reconcile"] = "1s"
    doc = {"site": "plant-1", "gateway": "gw", "store": {"path": str(tmp_path / "s.db")}, "devices": [entry]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    devices = config.load(path).devices

    async def recorded(n: int) -> bool:
        return len(await view.events()) >= n

    async with agent_for(devices) as view:
        await asyncio.sleep(1.0)  # the first read (the baseline) before anything changes
        await node_server.burst(3, 3)  # T1..T3 in one write: the counter jumps, the ring has them
        await wait_until(lambda: recorded(3), timeout=30)
        for _ in range(3):
            await node_server.burst(1, 1)
            await asyncio.sleep(0.3)
        await wait_until(lambda: recorded(6), timeout=30)
        assert await view.keys() == {(TRIP, str(t), "17") for t in range(1, 7)}
        assert await view.anomalies(gaps=True) == []
        assert await view.anomalies(gaps=False) == []
        assert [b["bootId"] for b in await view.boots()] == ["17"]

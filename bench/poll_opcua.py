"""The bare side of bench/poll.py's OPC UA comparison: a plain asyncua loop per controller.

One ``asyncua.Client`` per controller (security None, as the bench's agent connections), each
reading the same nodes the agent's poller reads on every poll (the list the agent resolves for
the device: ServerStatus/StartTime, the boot id, the channel's fields, the ring) with one
``read_attributes`` call, on the same schedule (the same interval, each connection at the
agent's phase for it; or, `aligned`, every client at the multiples of the interval, the schedule
issue 35's target is against), and nothing else: no decoding into snapshots, no tracking, no store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

from asyncua import Client

from agent.config import loader as config
from agent.config.sources import OpcUa
from agent.sources.opcua.session import namespace_index, resolve_nodes
from agent.sources.schedule import SlotBook, due_in_s


class Marks(Protocol):
    def mark(self, key: str) -> None: ...
    def open(self) -> None: ...
    def polls(self, keys: Sequence[str] | None = None) -> int: ...
    def interval_p99_ms(self) -> float | None: ...


async def bare_opcua(
    devices: Sequence[config.Device], seconds: float, *, warm_up: float, window: Marks, aligned: bool = False
) -> dict[str, Any]:
    """Each controller's nodes read on the agent's schedule for `seconds` (after `warm_up`);
    `aligned`: every client at the multiples of the interval instead (one wake-up for all)."""
    clients: list[tuple[config.Device, Client, list[Any]]] = []
    for dev in devices:
        conn = dev.connections[0]
        assert isinstance(conn, OpcUa)
        client = Client(conn.endpoint, timeout=conn.timeout)
        await client.connect()
        idx = await namespace_index(client, dev.namespace) if dev.namespace else None
        _, nodes = resolve_nodes(client, dev, idx)
        clients.append((dev, client, nodes))
    end = time.monotonic() + warm_up + seconds
    book = SlotBook()  # the agent's slots (agent.sources.schedule), dealt as its pollers take them
    phases = {d.name: book.take(d.poll).phase for d in devices}

    async def one(dev: config.Device, client: Client, nodes: list[Any]) -> None:
        period = dev.poll
        phase = 0.0 if aligned else phases[dev.name]
        while time.monotonic() < end:
            values = await client.read_attributes(nodes)
            if len(values) == len(nodes):
                window.mark(dev.name)
            await asyncio.sleep(due_in_s(period, phase, time.monotonic()))

    tasks = [asyncio.create_task(one(*c)) for c in clients]
    await asyncio.sleep(warm_up)
    window.open()
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall, n = time.process_time() - cpu0, time.monotonic() - wall0, window.polls()
    await asyncio.gather(*tasks)
    for _, client, _ in clients:
        with contextlib.suppress(Exception):
            await client.disconnect()
    return {"polls": n, "wall": wall, "cpu": cpu, "interval_p99_ms": window.interval_p99_ms()}

"""Helpers of the Sparkplug host scenarios (not a test module): deliveries, settings, and a
`SparkplugForwarder` started in this event loop."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
from sparkplug_parts import Broker, missing_parts

from agent.config.sparkplug import SparkplugUpstream
from agent.config.upstreams import Backoff
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.sparkplug.forwarder import SparkplugForwarder
from agent.store.store import Store

GROUP, NODE, UP, SITE = "plant-1", "gw-line3", "ignition", "plant-1"


def needs_parts() -> pytest.MarkDecorator:
    why = missing_parts()
    return pytest.mark.skipif(why is not None, reason=why or "")


def delivery(source: str, tid: int | str, boot: str, ts: str | None, state: str = "Tripped") -> Delivery:
    obj = {"source": source, "transitionId": tid, "bootId": boot, "payload": {"state": state}}
    if ts is not None:
        obj["sourceTimestamp"] = ts
    got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
    assert isinstance(got, Delivery)
    return got


def settings(broker: Broker, **kw: object) -> SparkplugUpstream:
    base: dict[str, object] = {
        "group_id": GROUP,
        "edge_node_id": NODE,
        "keepalive_s": 2.0,
        "backoff": Backoff(0.1, 0.5),
        "connect_timeout_s": 3.0,
    }
    base.update(kw)
    return SparkplugUpstream(UP, broker.url, **base)  # type: ignore[arg-type]


@dataclass
class Running:
    store: Store
    forwarder: SparkplugForwarder
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 15)
        await self.forwarder.close()


async def start(
    store: Store, up: SparkplugUpstream, devices: tuple[tuple[str, tuple[str, ...]], ...]
) -> Running:
    fwd = SparkplugForwarder(store, up, site=SITE, gateway="gw-test", devices=devices, idle_poll_s=0.05)
    stop = asyncio.Event()
    return Running(store, fwd, stop, asyncio.create_task(fwd.run(stop)))

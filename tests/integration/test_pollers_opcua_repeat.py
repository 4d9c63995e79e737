"""An OPC UA polled read that answers exactly what the last one answered observes nothing,
without building a snapshot; any changed value (a transition, a controller restart seen on the
same session) and any reconnect is read and observed in full.

One real simulator (two controllers on one server, so a controller's restart keeps the
session) and one `OpcUaSource` polled by hand (no timers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import loader as config
from agent.config.sources import Device
from agent.sources.opcua.poller import NOTHING, OpcUaSource
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def plant() -> AsyncIterator[Plant]:
    controllers = [Controller("PUMP-07", [ChannelSpec("Trip")]), Controller("PUMP-08", [ChannelSpec("Trip")])]
    async with Plant(controllers, modbus_port=None) as p:
        yield p


def device_of(plant: Plant, tmp_path: Path) -> Device:
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": "unused.db"},
        "devices": [plant.device_configs()[0]],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config.load(path).devices[0]


def keys(obs: Any) -> list[tuple[str, str | None, str | None, bool]]:
    return sorted((d.source, d.transition_id, d.boot_id, d.live) for d in obs.deliveries)


async def test_the_same_values_again_give_nothing_and_every_change_is_observed(
    plant: Plant, tmp_path: Path
) -> None:
    dev = device_of(plant, tmp_path)
    src = OpcUaSource(dev, dev.connections[0])  # type: ignore[arg-type]
    built = 0
    real = src._snapshot_of

    def counted(data_values: list[Any]) -> Any:
        nonlocal built
        built += 1
        return real(data_values)

    src._snapshot_of = counted  # type: ignore[method-assign]
    await src.connect()
    try:
        first = await src.poll()  # the first read: boot seen
        assert first is not NOTHING and [b.boot_id for b in first.boots] == ["17"]
        built = 0
        assert await src.poll() is NOTHING
        assert await src.poll() is NOTHING
        assert built == 0  # one Read, then a comparison: no snapshot built

        await plant.transition("PUMP-07", "Trip")
        assert keys(await src.poll()) == [("PUMP-07/Trip", "1", "17", True)]
        assert await src.poll() is NOTHING

        for _ in range(3):  # the counter jumps by 3: T2 and T3 come from the ring
            plant.controllers["PUMP-07"].transition("Trip")
        await plant.sync()
        assert keys(await src.poll()) == [
            ("PUMP-07/Trip", "2", "17", False),
            ("PUMP-07/Trip", "3", "17", False),
            ("PUMP-07/Trip", "4", "17", True),
        ]
        assert await src.poll() is NOTHING

        await plant.restart("PUMP-07")  # the server serves two controllers: the session stays
        restarted = await src.poll()
        assert [b.boot_id for b in restarted.boots] == ["18"]
        assert await src.poll() is NOTHING
        await plant.transition("PUMP-07", "Trip")
        assert keys(await src.poll()) == [("PUMP-07/Trip", "1", "18", True)]

        await src.close()  # a new session: read and observed in full
        await src.connect()
        built = 0
        after = await src.poll()
        assert after is not NOTHING and built == 1
        assert await src.poll() is NOTHING
    finally:
        await src.close()

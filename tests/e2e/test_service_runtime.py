"""The process-wide settings `edge-agent run` runs with (agent.service.runtime), in-process."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
import yaml

from agent.config.loader import load
from agent.service.run import Service
from agent.service.runtime import SERVICE_GC_THRESHOLD
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


async def test_the_service_runs_with_its_gc_threshold_and_gives_the_old_one_back(tmp_path: Path) -> None:
    before = gc.get_threshold()
    assert before[0] != SERVICE_GC_THRESHOLD
    async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as plant:
        doc = {
            "site": "s",
            "gateway": "g",
            "store": {"path": str(tmp_path / "e.db")},
            "devices": plant.device_configs(),
        }
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
        service = Service(load(tmp_path / "c.yaml"), status_interval_s=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        try:
            await asyncio.wait_for(service.ready.wait(), 30)
            running = gc.get_threshold()
        finally:
            stop.set()
            assert await asyncio.wait_for(task, 30) == 0
    assert running == (SERVICE_GC_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before

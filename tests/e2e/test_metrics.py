"""The optional Prometheus endpoint, scraped from a running service (in-process, real simulators)."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.config.loader import load
from agent.service.run import Service
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_metrics_endpoint_counts_polls_decisions_and_store_size(tmp_path: Path) -> None:
    port = free_port()
    async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as plant:
        doc = {
            "site": "s",
            "gateway": "g",
            "store": {"path": str(tmp_path / "e.db")},
            "metrics": {"listen": f"127.0.0.1:{port}"},
            "devices": plant.device_configs(),
        }
        doc["devices"][0]["poll"] = "100ms"
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
        service = Service(load(tmp_path / "c.yaml"), status_interval_s=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        await service.ready.wait()
        await plant.transition("PUMP-07", "Trip")
        text = ""
        for _ in range(50):
            await asyncio.sleep(0.2)
            text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            )
            if (
                'edge_agent_decisions_total{decision="inserted"} 1.0' in text
                and "edge_agent_polls_total{" in text
            ):
                break
        stop.set()
        await task
    assert 'edge_agent_decisions_total{decision="inserted"} 1.0' in text
    assert 'edge_agent_polls_total{connection="modbus:127.0.0.1' in text
    assert "edge_agent_store_bytes" in text

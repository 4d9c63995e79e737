"""`edge-agent run` as a real process (not a test module): its configuration over a simulated plant
(every device polled every 100 ms, one upstream) and the process itself, with this checkout on
PYTHONPATH. Shared by tests/e2e and tests/sparkplug (tests/conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from devices.plant import Plant

ROOT = Path(__file__).resolve().parents[2]


def agent_env() -> dict[str, str]:
    """The environment of an `edge-agent` subprocess: ours, with this checkout importable."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def write_config(tmp_path: Path, plant: Plant, gateway: str, upstream: dict[str, Any]) -> Path:
    """config.yaml in `tmp_path`: site plant-1, the store in tmp_path/events.db, the plant's devices."""
    doc: dict[str, Any] = {
        "site": "plant-1",
        "gateway": gateway,
        "store": {"path": str(tmp_path / "events.db")},
        "upstreams": [upstream],
        "devices": plant.device_configs(),
    }
    for dev in doc["devices"]:
        dev["poll"] = "100ms"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


async def start_agent(config: Path, log: Path) -> asyncio.subprocess.Process:
    """`edge-agent run -c config --log-level INFO`, its stderr appended to `log`."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent",
        "run",
        "-c",
        str(config),
        "--log-level",
        "INFO",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("ab"),
        env=agent_env(),
    )

"""`edge-agent run` as a real process (not a test module): its configuration over a simulated plant
(every device polled every 100 ms, one upstream) and the process itself, with this checkout on
PYTHONPATH. Shared by tests/e2e and tests/sparkplug (tests/conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
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


def status_json(config: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "agent", "status", "-c", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(json.loads(out))


def stored(db: Path) -> dict[tuple[str, str, str], int]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT source, transition_id, boot_id, count(*) FROM events GROUP BY 1, 2, 3"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()
    return {(r[0], r[1], r[2]): r[3] for r in rows}


async def eventually(check: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.1)


def connections(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The service's device connections by device, as `status --json` shows them (none yet: {})."""
    return {c["device"]: c for c in (status.get("service") or {}).get("connections", [])}


async def status_when(config: Path, check: Any, timeout: float = 30.0) -> dict[str, Any]:
    """`status --json`, asked again until `check(status)` holds (the service writes it every 2 s)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await asyncio.to_thread(status_json, config)
        if check(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status never showed the condition: {json.dumps(status)[:2000]}")
        await asyncio.sleep(0.2)

"""A hostile OPC UA server (devices/hostile_opcua.py) against the agent's real OPC UA pollers.

The server and the agent each run in a process of their own on 127.0.0.1: the agent's peak
RSS is its own. Every hostile device must be refused with a clear per-device error while the
control device on the same server is recorded, and the agent must stay up under 256 MB.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devices.hostile_opcua import agent_config

pytestmark = pytest.mark.timeout(90)

AGENT = Path(__file__).with_name("agent_process.py")
ROOT = Path(__file__).parents[2]


async def hostile_server(depth: int) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devices.hostile_opcua",
        "--depth",
        str(depth),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        assert line[:1] == ["READY"], line
        yield f"opc.tcp://127.0.0.1:{line[1]}/hostile/"
    finally:
        proc.kill()
        await proc.wait()


async def run_agent(tmp_path: Path, endpoint: str, seconds: float) -> dict[str, Any]:
    doc = {
        "site": "plant-1",
        "gateway": "gw-test",
        "store": {"path": str(tmp_path / "store.db")},
        "devices": agent_config(endpoint),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(AGENT),
        str(path),
        str(seconds),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), seconds + 60)
    assert proc.returncode == 0, err.decode()[-3000:]
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("depth", "nested_error"),
    [
        pytest.param(
            100,
            "an array of 1 nested Variants where one value is expected",
            id="variants nested 100 deep are refused as no single value",
        ),
        pytest.param(
            5000,
            "values nested deeper than can be decoded",
            id="variants nested 5000 deep are refused as undecodable",
        ),
    ],
)
async def test_hostile_values_are_refused_per_device_and_the_agent_stays_up_under_256_mb(
    tmp_path: Path, depth: int, nested_error: str
) -> None:
    async for endpoint in hostile_server(depth):
        result = await run_agent(tmp_path, endpoint, seconds=2.0)
    log = "\n".join(result["log"])
    assert result["alive"], log
    assert result["maxrss_kb"] < 256 * 1024, result["maxrss_kb"]
    assert result["keys"] == [["GOOD/Trip", "1", "7"]]  # the control device on the same server
    expected = {
        "BIG-STRING": "larger than max_message_size (4194304 bytes)",
        "BIG-ARRAY": "an array of 1000000 elements where one value is expected",
        "NESTED": nested_error,
        "WRONG-TYPE": "a byte string of 64 bytes where one value is expected",
    }
    for device, text in expected.items():
        mine = [line for line in result["log"] if f'Device "{device}"' in line]
        assert any(text in line for line in mine), (device, mine)
    good = [line for line in result["log"] if 'Device "GOOD"' in line]
    assert len(good) == 1 and "security policy None (configured explicitly)" in good[0], good

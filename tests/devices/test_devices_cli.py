"""``python -m devices`` as a subprocess (READY line, stdin commands, SIGSTOP as a half-open link) and its options."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from pymodbus.client import AsyncModbusTcpClient
from pymodbus.exceptions import ModbusIOException

import devices
from devices.cli import simulate, spread_multi_values

pytestmark = pytest.mark.timeout(30)
ROOT = Path(devices.__file__).resolve().parent.parent


async def spawn(*args: str) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devices",
        *args,
        stdin=pipe,
        stdout=pipe,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
    assert line.startswith("READY "), line
    return proc, json.loads(line[6:])


@pytest.fixture
async def modbus_plant() -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    proc, ready = await spawn("--no-opcua", "--modbus-port", "0", "--commands", "--quiet")
    yield proc, ready
    if proc.returncode is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        await proc.wait()


async def command(proc: asyncio.subprocess.Process, step: str) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(step.encode() + b"\n")
    await proc.stdin.drain()
    reply = (await asyncio.wait_for(proc.stdout.readline(), 5)).decode()
    assert reply.startswith("OK "), reply
    return dict(json.loads(reply[3:]))


async def test_commands_drive_the_model_and_sigterm_ends_cleanly(modbus_plant: Any) -> None:
    proc, ready = modbus_plant
    assert (await command(proc, "{transition: PUMP-07/Trip, count: 3}"))["PUMP-07"]["channels"] == {"Trip": 3}
    assert (await command(proc, "{restart: PUMP-07}"))["PUMP-07"]["boot_id"] == 18
    client = AsyncModbusTcpClient("127.0.0.1", port=ready["modbus"]["PUMP-07"]["port"], timeout=1, retries=0)
    assert await client.connect()
    rr = await client.read_holding_registers(100, count=2, device_id=1)
    client.close()
    assert rr.registers == [0, 3]  # ring head survived the restart
    proc.terminate()
    assert await asyncio.wait_for(proc.wait(), 5) == 0


async def test_sigstop_is_a_half_open_link_and_sigcont_heals_it(modbus_plant: Any) -> None:
    proc, ready = modbus_plant
    client = AsyncModbusTcpClient(
        "127.0.0.1", port=ready["modbus"]["PUMP-07"]["port"], timeout=0.3, retries=0
    )
    assert await client.connect()
    os.kill(proc.pid, signal.SIGSTOP)
    with pytest.raises(ModbusIOException):
        await client.read_holding_registers(0, count=2, device_id=1)
    os.kill(proc.pid, signal.SIGCONT)
    await asyncio.sleep(0.1)
    fresh = AsyncModbusTcpClient("127.0.0.1", port=ready["modbus"]["PUMP-07"]["port"], timeout=1, retries=0)
    assert await fresh.connect()
    rr = await fresh.read_holding_registers(0, count=2, device_id=1)
    assert rr.registers == [0, 17]
    client.close()
    fresh.close()


async def test_printed_config_snippet_names_the_bound_ports() -> None:
    proc, ready = await spawn(
        "--no-opcua", "--modbus-port", "0", "--controllers", "PUMP-07", "FAN-01", "--boot-id", "none"
    )
    assert proc.stdout is not None
    text = b""
    while text.count(b"word_order:") < 2:
        text += await asyncio.wait_for(proc.stdout.readline(), 5)
    proc.terminate()
    await proc.wait()
    snippet = yaml.safe_load(text.decode().split("Agent config snippet:\n", 1)[1])
    ports = {d["name"]: d["connections"][0]["modbus"]["port"] for d in snippet["devices"]}
    assert ports == {name: ep["port"] for name, ep in ready["modbus"].items()}
    assert all("boot_id" not in d for d in snippet["devices"])


def test_cli_main_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        devices.cli_main(["--help"])
    assert done.value.code == 0
    assert "--modbus-port" in capsys.readouterr().out


def test_python_m_devices_help_teaches_every_option() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "devices", "--help"], capture_output=True, text=True, env=env, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m devices [OPTIONS]" in done.stdout
    for param in simulate.params:
        if isinstance(param, click.Option):
            assert param.help, f"option {param.opts} of `python -m devices` has no help"
            assert param.opts[0] in done.stdout


def test_scenario_and_random_exclude_each_other(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("controllers: []\n")
    result = CliRunner().invoke(simulate, ["--scenario", str(scenario), "--random", "5"])
    assert result.exit_code == 2
    assert "cannot be used together" in result.output


@pytest.mark.parametrize(
    ("argv", "spread"),
    [
        (["--controllers", "A", "B"], ["--controllers", "A", "--controllers", "B"]),
        (
            ["--channels", "Trip", "Overload", "--ring", "10", "--controllers", "A"],
            ["--channels", "Trip", "--channels", "Overload", "--ring", "10", "--controllers", "A"],
        ),
        (["--host", "::1", "--controllers=A", "--quiet"], ["--host", "::1", "--controllers=A", "--quiet"]),
    ],
)
def test_several_words_after_controllers_or_channels_are_its_values(
    argv: list[str], spread: list[str]
) -> None:
    assert spread_multi_values(argv) == spread

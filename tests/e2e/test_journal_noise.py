"""The journal carries the agent's own lines only: with one PLC in a live OPC UA session and two
unreachable for seconds, a real `edge-agent run` under journald, even at --log-level DEBUG, logs
each link state change once, with its priority prefix, and no line of asyncua (its per-second
tracebacks and "close_secure_channel" warnings) or pymodbus (its repeats of our connect failures
and the raw frames it appends to errors)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
import yaml

from agent.service import logs
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """site: plant-1
gateway: gw
store:
  path: {store}
devices:
  - name: PUMP-07
    poll: 100ms
    backoff: {{initial: 100ms, max: 300ms}}
    connections: [{{modbus: {{host: 127.0.0.1, port: {modbus}}}}}]
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 11}}
  - name: PRESS-04
    poll: 100ms
    backoff: {{initial: 100ms, max: 300ms}}
    connections: [{{opcua: {{endpoint: "opc.tcp://127.0.0.1:{opcua}", timeout: 1s, security: {{policy: None}}}}}}]
    channels:
      Trip:
        transition_id: {{node: "ns=2;s=PRESS-04.Trip.TransitionId"}}
        state: {{node: "ns=2;s=PRESS-04.Trip.State"}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(90)
async def test_only_the_agents_lines_reach_the_journal_even_at_debug(tmp_path: Path) -> None:
    """One PLC served over OPC UA (a live session, transitions), two unreachable; --log-level DEBUG."""
    async with Plant([Controller("PUMP-09", [ChannelSpec("Trip")])], modbus_port=None, poll="100ms") as plant:
        doc = yaml.safe_load(
            CONFIG.format(store=tmp_path / "events.db", modbus=_free_port(), opcua=_free_port())
        )
        doc["devices"] += plant.device_configs()
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JOURNAL_STREAM": "8:1234"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "run", "-c", str(config), "--log-level", "DEBUG",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            for _ in range(3):
                await asyncio.sleep(1.5)  # many reconnect attempts of both dead links at a 300 ms backoff
                await plant.transition("PUMP-09", "Trip")
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().splitlines()
    assert proc.returncode == 0, lines
    unavailable = [line for line in lines if "link: unavailable" in line]
    assert {('"PUMP-07"' in line, '"PRESS-04"' in line) for line in unavailable} == {
        (True, False),
        (False, True),
    }
    assert len(unavailable) == 2, "one line per state change, not per attempt"
    assert any("PUMP-09" in line for line in lines), "the live PLC was polled"
    assert all(line[:1] == "<" and line[1].isdigit() and line[2] == ">" for line in lines), lines
    foreign = [line for line in lines if " asyncua" in line or " pymodbus" in line]
    assert foreign == []


def test_setting_up_logs_never_lowers_a_librarys_level() -> None:
    lib = logging.getLogger("asyncua")
    saved = lib.level, logging.getLogger().handlers[:], logging.getLogger().level
    try:
        lib.setLevel(logging.NOTSET)
        logs.setup("DEBUG")
        assert lib.level == logging.CRITICAL  # --log-level DEBUG does not open it
        assert logging.getLogger("aiomqtt").level == logging.WARNING
    finally:
        lib.setLevel(saved[0])
        logging.getLogger().handlers[:] = saved[1]
        logging.getLogger().setLevel(saved[2])

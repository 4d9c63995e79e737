"""`edge-agent run` as a real process: simulators, a real HTTP upstream, SIGTERM mid-flow, restart.

Every transition the controllers made must be in the store once (one canonical) and upstream at least
once; the restart resumes from the store (nothing new for what did not change) and picks up what
happened while the agent was down from the controllers' ring buffers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_process import connections, eventually, start_agent, status_when, stored, write_config

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(120)


def both_pumps_up(status: dict[str, Any]) -> bool:
    conns = connections(status)
    return status["running"] is True and all(
        conns.get(d, {}).get("state") == "up" for d in ("PUMP-07", "PUMP-08")
    )


@pytest.fixture
async def plant() -> AsyncIterator[Plant]:
    ctrls = [
        Controller(name, [ChannelSpec("Trip"), ChannelSpec("OverTemp")], ring_capacity=8)
        for name in ("PUMP-07", "PUMP-08")
    ]
    async with Plant(ctrls, opcua_port=None) as p:
        yield p


async def test_sigterm_mid_flow_then_restart_loses_nothing_and_invents_nothing(
    plant: Plant, tmp_path: Path
) -> None:
    made: set[tuple[str, str, str]] = set()

    async def transitions(n: int, pause: float) -> None:
        for i in range(n):
            device = ("PUMP-07", "PUMP-08")[i % 2]
            channel = ("Trip", "OverTemp")[(i // 2) % 2]
            entry = await plant.transition(device, channel)
            made.add((f"{device}/{channel}", str(entry.transition_id), str(entry.boot_id)))
            await asyncio.sleep(pause)

    async with Receiver() as rx:
        historian = {"name": "historian", "http": {"url": rx.url + "/ingest", "batch_size": 50}}
        config = write_config(tmp_path, plant, "gw-e2e", historian)
        db, log = tmp_path / "events.db", tmp_path / "agent.log"
        agent = await start_agent(config, log)
        await eventually(lambda: db.exists() and "started" in log.read_text())
        await status_when(config, both_pumps_up)  # both controllers polled before anything happens
        assert stored(db) == {}
        await transitions(12, 0.15)
        await eventually(lambda: len(stored(db)) >= 6)
        status = await status_when(config, lambda s: connections(s).get("PUMP-07", {}).get("boot_id") == "17")
        assert status["running"] is True
        assert connections(status)["PUMP-07"]["state"] == "up"
        assert [u["upstream"] for u in status["upstreams"]] == ["historian"]
        storage = status["service"]["storage"]  # what the process wrote, for the flash (issue 32)
        assert isinstance(storage["written_bytes"], int) and storage["commits"] > 0, storage
        with sqlite3.connect(db) as con:  # the live state is in memory, not a store transaction
            in_memory = con.execute("SELECT value FROM store_meta WHERE name = 'live_file'").fetchall()
            rows = con.execute("SELECT count(*) FROM live_state").fetchone()[0]
        assert (in_memory, rows) != ([], 0) and (not in_memory or rows == 0), (in_memory, rows)
        agent.send_signal(signal.SIGTERM)  # mid-flow: transitions keep coming while it stops
        await transitions(4, 0.05)
        assert await asyncio.wait_for(agent.wait(), 30) == 0, log.read_text()
        assert "stopped cleanly" in log.read_text()
        await transitions(4, 0.05)  # while the agent is down: only the ring buffer keeps them
        await plant.restart("PUMP-08")  # and a controller restarts meanwhile
        await transitions(4, 0.05)

        agent = await start_agent(config, log)
        await eventually(lambda: made <= set(stored(db)), timeout=40)
        await eventually(lambda: rx.stats()["distinct"] >= len(stored(db)), timeout=40)
        agent.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(agent.wait(), 30) == 0, log.read_text()
        upstream = rx.stats()

    events = stored(db)
    assert set(events) == made, "every transition once, nothing invented"
    assert all(n == 1 for n in events.values())
    con = sqlite3.connect(db)
    boots = con.execute("SELECT device, boot_id, previous_boot_id FROM boots ORDER BY boot_row").fetchall()
    conflicts = con.execute("SELECT count(*) FROM arrivals WHERE decision = 'conflict'").fetchone()[0]
    undelivered = con.execute("SELECT count(*) FROM outbox WHERE state <> 'delivered'").fetchone()[0]
    con.close()
    assert ("PUMP-08", "18", "17") in boots
    assert conflicts == 0
    assert undelivered == 0
    assert upstream["distinct"] >= len(events), json.dumps(upstream)

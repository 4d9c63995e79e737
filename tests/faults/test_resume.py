"""The agent resumes from the store after SIGTERM and SIGKILL (P3, P15, P16), Modbus and OPC UA.

Real agent processes (`python -m agent run`) against the `devices/` simulators and a real store.
Each case: record T3/B17, stop the agent, let Trip change 5 times (P15), start again; stop,
change nothing (P3), start again; stop, restart the controller as B18 and change once (P16),
start again. Between them the agent's only memory is the store. Each protocol is stopped with
SIGTERM and SIGKILL in turn (every scenario sees both signals over the two cases), one with a
ring of 3 entries (buffered data first, an overrun for the rest), one without (a gap). A power cut of the gateway is SIGKILL with the store's
`synchronous=FULL` commits (what was committed survives; nothing else is assumed).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent.store import live_file
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(120)

SOURCE = "PLC-00/Trip"


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def polls(db: Path) -> int:
    """Polls the running agent reported in its live state (written every status interval, in the
    file in memory the store names, or in the store)."""
    if not db.exists():
        return 0
    named = rows(db, "SELECT value FROM store_meta WHERE name = 'live_file'")
    if named:
        got = live_file.read(str(named[0][0]))
        found = [(got[1],)] if got is not None else []
    else:
        found = rows(db, "SELECT state FROM live_state WHERE name = 'service'")
    if not found:
        return 0
    return sum(int(c["polls"]) for c in json.loads(found[0][0])["connections"])


@pytest.mark.parametrize(
    ("protocol", "signals", "ring"),
    [
        pytest.param("modbus", ["SIGKILL", "SIGTERM", "SIGKILL"], True, id="modbus-ring"),
        pytest.param("opcua", ["SIGTERM", "SIGKILL", "SIGTERM"], False, id="opcua-no-ring"),
    ],
)
async def test_the_agent_resumes_from_the_store_after_it_was_stopped_or_killed(
    harness: ModuleType, checker: ModuleType, tmp_path: Path, protocol: str, signals: list[str], ring: bool
) -> None:
    ctrl = Controller("PLC-00", [ChannelSpec("Trip")], ring_capacity=3)
    plant = Plant(
        [ctrl], modbus_port=0 if protocol == "modbus" else None, opcua_port=0 if protocol == "opcua" else None
    )
    db = tmp_path / "events.db"
    async with plant:
        devices = plant.device_configs()
        if not ring:
            devices[0].pop("ring")
        devices[0].pop("events", None)  # only reads: what a restarted agent sees is the read
        cfg = harness.write_config(tmp_path / "config.yaml", store=db, devices=devices, upstreams=[])
        agent = harness.AgentProcess(cfg, tmp_path / "agent.log")
        load = harness.Load(plant)

        async def run_until(key: tuple[str, str, str]) -> None:
            await agent.start()
            await agent.started()
            await harness.eventually(lambda: key in checker.committed_keys(db), 30, f"{key} committed")

        async def end() -> None:
            if (signals.pop(0) if signals else "SIGTERM") == "SIGKILL":
                await agent.kill9()
            else:
                rc, _ = await agent.stop()
                assert rc == 0, agent.this_run()[-3000:]

        try:
            for _ in range(3):
                await load.transition("PLC-00", "Trip")
            await run_until((SOURCE, "3", "17"))
            load.made.clear()  # before its first start the agent watched nothing: accounted from here
            await end()

            # P15: the counter moves on while the agent is down
            for _ in range(5):
                await load.transition("PLC-00", "Trip")
            await run_until((SOURCE, "8", "17"))
            assert "resuming device=PLC-00 boot_id=17 positions=Trip:3" in agent.this_run()
            found = rows(db, "SELECT kind, boot_id, from_value, to_value FROM anomalies")
            if ring:  # T6..T8 still in the ring of 3: read as buffered data; T4, T5 overrun
                assert found == [("overrun", "17", "4", "5")]
                buffered = rows(
                    db, f"SELECT transition_id FROM arrivals WHERE source = '{SOURCE}' AND live = 0"
                )
                assert {"6", "7"} <= {r[0] for r in buffered}
            else:
                assert found == [("gap", "17", "4", "7")]
            assert len([ln for ln in agent.this_run().splitlines() if " source=PLC-00/Trip " in ln]) == 1
            events = len(checker.committed_keys(db))
            await end()

            # P3: nothing changes while the agent is down
            arrivals = rows(db, "SELECT count(*) FROM arrivals")[0][0]
            await agent.start()
            await agent.started()
            before = polls(db)
            await harness.eventually(lambda: polls(db) >= before + 5, 30, "five polls after the restart")
            await end()
            assert len(checker.committed_keys(db)) == events
            assert rows(db, "SELECT count(*) FROM anomalies")[0][0] == 1
            new = rows(db, f"SELECT decision FROM arrivals LIMIT -1 OFFSET {arrivals}")
            assert {r[0] for r in new} <= {"duplicate"}, new

            # P16: the controller restarts as B18 and changes once while the agent is down
            await plant.restart("PLC-00")
            load.made.add((SOURCE, "1", "18"))
            await load.transition("PLC-00", "Trip")
            await run_until((SOURCE, "1", "18"))
            boot = rows(db, "SELECT previous_boot_id, evidence FROM boots WHERE boot_id = '18'")
            assert boot and boot[0][0] == "17"
            assert json.loads(boot[0][1])["previous_boot_last_transitionId"] == {"Trip": "8"}
            assert rows(db, "SELECT count(*) FROM anomalies WHERE boot_id = '18'")[0][0] == 0
            await end()
        finally:
            await agent.close()
    accounting = checker.account(db, load.made)
    assert accounting.lost_silently == [], accounting
    assert checker.integrity(db) == "ok"
    assert "Traceback" not in (tmp_path / "agent.log").read_text()

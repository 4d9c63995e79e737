"""One controller read over Modbus and OPC UA: no false gap across the two paths, one log line per gap.

A real agent process reads both simulators of one controller (no ring: gaps come from the
counters alone). While only the Modbus link is cut, OPC UA delivers T2..T5; when Modbus comes
back its tracker sees 1 -> 5 and claims 2..4, which the store already holds: no gap record.
When both paths are cut, T6, T7 are missed by both: one gap record 6..7 and one log line,
although both trackers claim it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from devices.controller import ChannelSpec, Controller
from devices.plant import Plant

pytestmark = pytest.mark.timeout(120)

SOURCE = "PLC-00/Trip"


def rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return [tuple(r) for r in con.execute(sql, params).fetchall()]
    finally:
        con.close()


def read_over(db: Path, protocol: str, tid: int) -> bool:
    """Whether the path `protocol` has delivered T`tid` (an arrival of its own, any decision)."""
    if not db.exists():
        return False
    found = rows(
        db, "SELECT 1 FROM arrivals WHERE source = ? AND transition_id = ? AND receiver LIKE ?",
        SOURCE, str(tid), f"{protocol}%",
    )  # fmt: skip
    return bool(found)


async def test_a_gap_one_path_claims_for_what_the_other_delivered_is_not_recorded(
    harness: ModuleType, checker: ModuleType, tmp_path: Path
) -> None:
    ctrl = Controller("PLC-00", [ChannelSpec("Trip")], ring_capacity=3)
    db = tmp_path / "events.db"
    async with Plant([ctrl]) as plant:
        devices = plant.device_configs()
        devices[0].pop("ring")
        devices[0].pop("events", None)
        cfg = harness.write_config(tmp_path / "config.yaml", store=db, devices=devices, upstreams=[])
        agent = harness.AgentProcess(cfg, tmp_path / "agent.log")
        load = harness.Load(plant)
        both = ("modbus", "opcua")
        try:
            await agent.start()
            await agent.started()
            await load.transition("PLC-00", "Trip")
            await harness.eventually(lambda: all(read_over(db, p, 1) for p in both), 30, "T1 over both paths")

            await plant.modbus["PLC-00"].cut_link()
            for tid in range(2, 6):
                await load.transition("PLC-00", "Trip")
                await harness.eventually(lambda t=tid: read_over(db, "opcua", t), 30, f"T{tid} over OPC UA")
            await plant.modbus["PLC-00"].restore_link()
            await harness.eventually(lambda: read_over(db, "modbus", 5), 30, "T5 over Modbus")
            assert rows(db, "SELECT count(*) FROM anomalies")[0][0] == 0

            await plant.cut_link("PLC-00")
            for _ in range(3):
                await load.transition("PLC-00", "Trip")
            await plant.restore_link("PLC-00")
            await harness.eventually(lambda: all(read_over(db, p, 8) for p in both), 30, "T8 over both paths")
            rc, _ = await agent.stop()
            assert rc == 0
        finally:
            await agent.close()
    assert rows(db, "SELECT kind, boot_id, from_value, to_value FROM anomalies") == [("gap", "17", "6", "7")]
    lines = [ln for ln in (tmp_path / "agent.log").read_text().splitlines() if f"source={SOURCE} " in ln]
    assert len(lines) == 1 and "gap" in lines[0] and "from=6 to=7" in lines[0], lines
    accounting = checker.account(db, load.made - {(SOURCE, "1", "17")})
    assert (accounting.canonical, accounting.inside_gaps, accounting.lost_silently) == (5, 2, [])

"""Scenarios A1-A7 of OPC UA Alarms & Conditions (contract section 7) against the simulator.

Each test starts one simulator (alarm conditions, ConditionRefresh scoped to one subscription)
behind a cuttable TCP link, runs the real agent on a real SQLite store, and reads the store as
`report --json` shows it.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)

PLC = "PLC-1"
HIGH = f"{PLC}/{PLC}.HighTemp"


def by_decision(arrivals: list[dict[str, Any]], decision: str) -> list[dict[str, Any]]:
    return [a for a in arrivals if a["decision"] == decision]


async def test_a1_activate_acknowledge_clear_are_three_canonical_events(rig: Any, wait_until: Any) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: _refreshed(rig, 1))
        ids = [await rig.alarm("HighTemp", a) for a in ("activate", "acknowledge", "clear")]
        await wait_until(lambda: _events(view, 3))
        events = await view.events()
        assert [(e["source"], e["transitionId"]) for e in events] == [(HIGH, i) for i in ids]
        states = [(e["payload"]["ActiveState/Id"], e["payload"]["AckedState/Id"], e["payload"]["Retain"]) for e in events]
        assert states == [(True, False, True), (True, True, True), (False, True, False)]
        arrivals = await view.arrivals()
        assert [a["via"] for a in arrivals] == ["live"] * 3
        print(events, arrivals, await view.boots(), await view.anomalies())


async def _refreshed(rig: Any, n: int) -> bool:
    return len(rig.server.alarms.refreshes) >= n


async def _events(view: Any, n: int) -> bool:
    return len(await view.events()) >= n

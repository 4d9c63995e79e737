"""The live state's snapshot (what `status` and the metrics read) is what `dataclasses.asdict` made,
without its deep copy (which held the event loop 60 ms every 2 s at 1,200 connections)."""

from __future__ import annotations

import json
from dataclasses import asdict

from agent.core.live import ServiceLive, TaskLive


def oracle(live: ServiceLive) -> dict[str, object]:
    """The snapshot as it was made before: asdict, each connection's time as text."""
    out = asdict(live)
    conns = []
    for c in live.connections:
        d = asdict(c)
        del d["last_poll_s"], d["period_s"]
        conns.append({**d, "last_poll_at": c.last_poll_at})
    return {**out, "connections": conns}


def test_the_snapshot_is_the_same_data_as_asdict_made() -> None:
    live = ServiceLive("2026-12-06T07:00:00.000Z", 4242, "/etc/edge-agent/config.yaml")
    up = live.connection("PUMP-07", "modbus:10.0.0.7:502")
    up.period_s = 0.1
    up.polled(1_765_000_000.0, "17")
    up.polled(1_765_000_000.35, "17")
    up.problems["Trip"] = "Modbus exception 2"
    down = live.connection("FAN-01", "opcua:opc.tcp://10.0.0.8:4840")
    down.failed("cannot connect (refused)")
    live.tasks.append(TaskLive("poller[PUMP-07 modbus:10.0.0.7:502]", failures=1, last_error="boom"))
    live.upstreams = {"central": {"up": True, "sent": 3, "sparkplug": {"bd_seq": 1, "devices": ["PUMP-07"]}}}
    live.recorder = {"batches": 2, "store_problem": None}
    live.salvage = {"rows": 1}
    live.reloaded("2026-12-06T07:01:00.000Z", "applied", {"summary": "devices: +FAN-01"})
    snap = live.snapshot()
    assert snap == oracle(live)
    assert json.dumps(snap, sort_keys=True) == json.dumps(oracle(live), sort_keys=True)
    snap["connections"][0]["problems"]["Trip"] = "changed"  # a copy: the live state is not touched
    assert up.problems["Trip"] == "Modbus exception 2"

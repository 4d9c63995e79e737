"""A Sparkplug host that joins late, on a second stack no one here wrote: pysparkplug 0.6.1
(`peers/pysparkplug/late_host.py`, in its own virtual environment: it pins paho-mqtt < 2).

It subscribes after the edge node's births went out. A data message it cannot read without them
(the agent leaves the datatype out of data metrics, as Sparkplug 3.0 recommends) makes it ask for
a rebirth; the agent answers with NBIRTH and DBIRTH, and from then on the host reads every
metric. The identity is in the event metric's value (canonical JSON) as well as in its
PropertySet, which this host's API does not expose (docs/sparkplug.md, "Hosts that join late").
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from sparkplug_parts import Broker, Host
from sparkplug_scenario import GROUP, delivery, needs_parts, settings, start

from agent.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "peers" / "pysparkplug"
PYTHON = PEER / ".venv" / "bin" / "python"

pytestmark = [
    needs_parts(),
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        not PYTHON.exists(),
        reason="pysparkplug's environment is missing: python3 -m venv peers/pysparkplug/.venv &&"
        " peers/pysparkplug/.venv/bin/pip install -r peers/pysparkplug/requirements.txt (.ci/run does)",
    ),
]


class LateHost:
    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen(
            [str(PYTHON), str(PEER / "late_host.py"), "--port", str(port), "--group", GROUP],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    async def until(self, pred: Any, timeout: float = 20.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                for line in list(self.lines):
                    if pred(line):
                        return line
                if self.proc.poll() is not None:
                    err = self.proc.stderr.read() if self.proc.stderr else ""
                    raise AssertionError(f"the late host ended: {err}")
                await asyncio.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ts(n: int) -> str:
    return f"2026-04-22T08:00:{n:02d}.000Z"


def decoded(kind: str) -> Any:
    return lambda line: line.get("kind") == kind and line.get("decoded")


def transition_value(line: dict[str, Any]) -> dict[str, Any] | None:
    for m in line.get("metrics", []):
        if m["name"] == "Events/Transition":
            return dict(json.loads(m["value"]))
    return None


async def test_a_host_that_joins_late_asks_for_a_rebirth_and_then_reads_every_metric(
    broker: Broker, host: Host, sp_store: Store
) -> None:
    run = await start(sp_store, settings(broker), (("PUMP-07", ("Trip",)),))
    late: LateHost | None = None
    try:
        await sp_store.record([delivery("PUMP-07/Trip", 1, "B17", ts(1))])
        await host.until(lambda e: e.get("verb") == "DDATA")  # births and data went out before it
        late = LateHost(broker.port)
        await late.until(lambda line: line.get("ready"))
        await asyncio.sleep(0.5)  # subscribed
        await sp_store.record([delivery("PUMP-07/Trip", 2, "B17", ts(2))])
        undecodable = await late.until(lambda line: line.get("kind") == "DDATA")
        assert undecodable["decoded"] is False, undecodable  # no datatype without the DBIRTH
        await late.until(lambda line: line.get("asked_rebirth") == "gw-line3")
        births = [await late.until(decoded(kind)) for kind in ("NBIRTH", "DBIRTH")]
        declared = {m["name"]: m["datatype"] for m in births[1]["metrics"]}
        assert declared["Events/Transition"] == "STRING" and declared["Trip/State"] == "STRING", declared
        await sp_store.record([delivery("PUMP-07/Trip", 3, "B17", ts(3))])
        data = await late.until(
            lambda line: (
                line.get("kind") == "DDATA"
                and transition_value(line) is not None
                and transition_value(line).get("transitionid") == "3"
            )
        )  # type: ignore[union-attr]
        event = transition_value(data)
        assert event is not None
        # the identity, from the value alone: this host's API drops the PropertySet
        assert (event["id"], event["source"], event["bootid"], event["transitionid"]) == (
            "B17:3",
            "plant-1/PUMP-07/Trip",
            "B17",
            "3",
        )
        assert {m["name"]: m["value"] for m in data["metrics"]}["Trip/State"] == "Tripped"
    finally:
        if late is not None:
            late.close()
        await run.finish()

"""SIGTERM during a drain (short form; the long form is `python bench/faults.py --stops 20`).

Each round builds a backlog while the upstream fails, lets it come back slowly and sends
SIGTERM mid-drain; the fifth round's upstream hangs (takes requests, never answers), so the
drain is cut at its bound. Every stop exits 0 within systemd's TimeoutStopSec=30s, and the one
checker finds nothing lost: what was not acknowledged goes out after the next start.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

STOPS_IN_CI = 5

pytestmark = pytest.mark.timeout(150)


async def test_sigterm_during_a_drain_exits_in_time_and_loses_nothing(
    harness: ModuleType, tmp_path: Path
) -> None:
    figures = await harness.stop_campaign(tmp_path, stops=STOPS_IN_CI, seed=11)
    text = json.dumps(figures)
    assert figures["exit_codes"] == [0], text
    assert figures["worst_stop_s"] < harness.STOP_TIMEOUT_S, text
    assert figures["worst_stop_s"] > 5.0, f"no round was cut at the drain bound: {text}"
    assert figures["problems"] == [], text
    assert figures["upstream_distinct"] == figures["committed"] == figures["made"] > 0, text

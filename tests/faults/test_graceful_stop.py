"""SIGTERM during a drain (short form in the suite; the long form, 20 stops, is marked `slow`: run
by hand with `python -m pytest -m slow tests/faults`, or as figures with `python bench/faults.py
--stops 20`).

Each round builds a backlog while the upstream fails, lets it come back slowly and sends
SIGTERM mid-drain; the fifth round's upstream hangs (takes requests, never answers), so the
drain is cut at its bound. Every stop exits 0 within the stop budget (which fits inside the
unit's TimeoutStopSec), and the one checker finds nothing lost: what was not acknowledged goes
out after the next start. The hard stop itself is checked in-process with a step that hangs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from types import ModuleType

import pytest

from agent.service.shutdown import STOP_BUDGET, SYSTEMD_MARGIN_S, StopBudget, StopSequence

STOPS_IN_CI = 5
STOPS_BY_HAND = 20  # the long form: `-m slow` (or `python bench/faults.py --kills 0 --stops 20`)

pytestmark = pytest.mark.timeout(150)


@pytest.mark.parametrize(
    "stops",
    [
        pytest.param(STOPS_IN_CI, id="short"),
        pytest.param(STOPS_BY_HAND, id="long", marks=[pytest.mark.slow, pytest.mark.timeout(1800)]),
    ],
)
async def test_sigterm_during_a_drain_exits_in_time_and_loses_nothing(
    harness: ModuleType, tmp_path: Path, stops: int
) -> None:
    figures = await harness.stop_campaign(tmp_path, stops=stops, seed=11)
    text = json.dumps(figures)
    assert figures["exit_codes"] == [0], text
    assert figures["worst_stop_s"] < harness.STOP_TIMEOUT_S, text
    assert figures["worst_stop_s"] < STOP_BUDGET.hard_stop_s + SYSTEMD_MARGIN_S, text
    assert figures["worst_stop_s"] > 5.0, f"no round was cut at the drain bound: {text}"
    assert figures["drains_cut"] >= 1, f"no drain was cut short with a log line: {text}"
    assert figures["problems"] == [], text
    assert figures["upstream_distinct"] == figures["committed"] == figures["made"] > 0, text


async def hang() -> None:
    await asyncio.Event().wait()


async def test_a_hung_step_is_cancelled_at_the_hard_stop_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = StopBudget(pollers_s=0.1, recorder_s=0.1, drain_s=0.1, settle_s=0.1, close_s=0.1)
    stopping = StopSequence(budget)
    hung = asyncio.create_task(hang(), name="forwarder[hung]")
    t0 = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="agent.service.shutdown"):
        finished = await stopping.wait_tasks([hung], 60.0, "forwarders")
    took = time.monotonic() - t0
    assert finished is False and hung.cancelled()
    assert took < budget.hard_stop_s + 1.0, took
    assert stopping.cut_short == ["forwarders"]
    assert any("hard stop" in r.message and "forwarder[hung]" in r.message for r in caplog.records)


async def test_a_step_over_its_own_bound_is_cancelled_and_the_rest_keep_their_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopping = StopSequence(STOP_BUDGET)
    with caplog.at_level(logging.ERROR, logger="agent.service.shutdown"):
        assert await stopping.step(hang(), 0.2, "pollers") is False
        assert await stopping.step(asyncio.sleep(0), 0.2, "recorder") is True
    assert stopping.cut_short == ["pollers"]
    assert [r.message for r in caplog.records] == ["pollers did not stop within 0.2s; cancelling pollers"]
    assert stopping.remaining_s() > STOP_BUDGET.hard_stop_s - 5.0

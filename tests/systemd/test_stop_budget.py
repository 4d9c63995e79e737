"""The stop budget the service runs with fits inside the unit's TimeoutStopSec, with margin.

Reads both sides from their one source: `StopBudget` in `agent/service/shutdown.py` and the
`TimeoutStopSec=` line of `systemd/edge-agent.service`, so neither can drift alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.service.shutdown import STOP_BUDGET, SYSTEMD_MARGIN_S, StopBudget

UNIT = Path(__file__).parents[2] / "systemd" / "edge-agent.service"

UNITS_S = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "ms": 0.001}


def parse_timespan(text: str) -> float:
    """A systemd time span as used for TimeoutStopSec= ("30s", "1min 30s", "90")."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s+", "", text.strip()):
        raise ValueError(f"not a time span this test understands: {text!r}")
    return sum(float(n) * UNITS_S[u] for n, u in parts)


def timeout_stop_s(unit_text: str) -> float:
    values = re.findall(r"^TimeoutStopSec=(.+)$", unit_text, flags=re.MULTILINE)
    assert len(values) == 1, f"expected one TimeoutStopSec= line, found {values}"
    return parse_timespan(values[0])


def test_timespans_parse_like_systemd() -> None:
    assert parse_timespan("30s") == 30.0
    assert parse_timespan("90") == 90.0
    assert parse_timespan("1min 30s") == 90.0
    with pytest.raises(ValueError):
        parse_timespan("infinity")


def test_the_hard_stop_is_the_sum_of_every_step() -> None:
    b = STOP_BUDGET
    assert b.hard_stop_s == b.pollers_s + b.recorder_s + b.drain_s + b.settle_s + b.close_s
    assert b.forwarders_s == b.drain_s + b.settle_s


def test_stop_budget_plus_margin_fits_inside_timeout_stop_sec() -> None:
    limit = timeout_stop_s(UNIT.read_text())
    need = STOP_BUDGET.hard_stop_s + SYSTEMD_MARGIN_S
    assert need <= limit, (
        f"stop budget {STOP_BUDGET.hard_stop_s:g}s + margin {SYSTEMD_MARGIN_S:g}s = {need:g}s "
        f"exceeds TimeoutStopSec={limit:g}s in {UNIT.name}"
    )


def test_the_check_fails_for_a_budget_that_does_not_fit() -> None:
    too_long = StopBudget(pollers_s=10.0, recorder_s=10.0, drain_s=10.0, settle_s=5.0, close_s=0.0)
    assert too_long.hard_stop_s + SYSTEMD_MARGIN_S > timeout_stop_s("TimeoutStopSec=30s\n")

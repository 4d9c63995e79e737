"""kill -9 of the agent while the controllers change all the time and keep a ring of 3: silent
loss = 0 (short form, 10 kills).

Every transition the simulators made after the agent first read them is canonical, or inside
a gap or overrun record of its source and boot. The long form (200 kills, marked `slow`: run by
hand with `python -m pytest -m slow tests/faults`) is the same test; `python bench/faults.py
--kills 0 --resume-kills 200` runs the same campaign for its figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

KILLS_IN_CI = 10
KILLS_BY_HAND = 200  # the long form: `-m slow`
SEED = 11

pytestmark = pytest.mark.timeout(150)


@pytest.mark.parametrize(
    "kills",
    [
        pytest.param(KILLS_IN_CI, id="short"),
        pytest.param(KILLS_BY_HAND, id="long", marks=[pytest.mark.slow, pytest.mark.timeout(3600)]),
    ],
)
async def test_kill9_while_counters_move_on_loses_nothing_silently(
    harness: ModuleType, tmp_path: Path, kills: int
) -> None:
    figures = await harness.resume_kill_campaign(tmp_path, kills=kills, seed=SEED, up_s=0.6, down_s=0.3)
    text = json.dumps(figures)
    assert figures["made"] > 0 and figures["canonical"] > 0, text  # the campaign did something
    assert figures["lost_silently"] == 0, text
    assert figures["duplicates"] == 0 and figures["integrity"] == "ok", text
    assert figures["tracebacks"] == 0, text

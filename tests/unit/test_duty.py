"""The duty cycle (agent.core.duty) and the ledger prune's pace (agent.ledger.prune_pace): work
at most `duty` of the wall time, rests only after a slice of work."""

from __future__ import annotations

import pytest

from agent.core.duty import rest_after
from agent.ledger import prune_pace


@pytest.mark.parametrize(
    ("took", "duty", "rest"),
    [
        (1.0, 1.0, 0.0),  # no rest
        (1.0, 0.5, 1.0),  # as long as it worked
        (1.0, 0.2, 4.0),  # the gateway store's default: a fifth of the time
        (0.3, 0.25, 0.9),
        (0.0, 0.5, 0.0),
        (-1.0, 0.5, 0.0),  # a clock stepped back never makes a negative rest
    ],
)
def test_rest_after(took: float, duty: float, rest: float) -> None:
    assert rest_after(took, duty) == pytest.approx(rest)


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5])
def test_a_duty_outside_0_1_is_refused(duty: float) -> None:
    with pytest.raises(ValueError, match="duty"):
        rest_after(1.0, duty)


async def test_the_pace_rests_after_a_slice_in_proportion(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr(prune_pace.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(prune_pace.asyncio, "sleep", sleep)
    pace = prune_pace.Pace(0.25)
    clock[0] += 0.05
    await pace.step()
    assert slept == [], "under a slice: no rest yet"
    clock[0] += 0.25  # 0.3 s of work since the last rest
    await pace.step()
    assert slept == [pytest.approx(0.9)]
    clock[0] += 0.02
    await pace.step()
    assert len(slept) == 1, "the rest itself is not counted as work"
    assert pace.rested_s == pytest.approx(0.9)
    full = prune_pace.Pace(1.0)
    clock[0] += 5.0
    await full.step()
    assert len(slept) == 1 and full.rested_s == 0.0

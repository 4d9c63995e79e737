"""Backoff table: capped, exponential, jittered, Retry-After wins when longer."""

from __future__ import annotations

import pytest

from agent.core.retry import RETRY_AFTER_CAP_S, backoff_s, retry_delay_s


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [
        pytest.param(0, 0.5, 0.0, id="no failure means no wait"),
        pytest.param(1, 0.0, 0.25, id="first failure waits half the initial delay at the lowest jitter"),
        pytest.param(1, 0.999, 0.49975, id="first failure waits just under the initial delay at the top"),
        pytest.param(2, 0.0, 0.5, id="second failure doubles"),
        pytest.param(3, 0.0, 1.0, id="third failure doubles again"),
        pytest.param(8, 0.0, 30.0, id="the cap bounds the base delay"),
        pytest.param(8, 0.5, 45.0, id="jitter spreads within the upper half of the capped base"),
        pytest.param(5000, 0.0, 30.0, id="a very long outage neither overflows nor exceeds the cap"),
    ],
)
def test_backoff_table(failures: int, jitter: float, expected: float) -> None:
    assert backoff_s(failures, initial_s=0.5, max_s=60.0, jitter=jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        pytest.param(None, 0.5, id="without Retry-After our backoff decides"),
        pytest.param(0.1, 0.5, id="a shorter Retry-After does not make us hurry"),
        pytest.param(7.0, 7.0, id="a longer Retry-After is honoured"),
        pytest.param(10 * 86400.0, RETRY_AFTER_CAP_S, id="an absurd Retry-After is capped at an hour"),
    ],
)
def test_retry_after_wins_when_longer(retry_after: float | None, expected: float) -> None:
    got = retry_delay_s(2, initial_s=0.5, max_s=60.0, jitter=0.0, retry_after_s=retry_after)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("jitter", [pytest.param(-0.1, id="negative"), pytest.param(1.0, id="one")])
def test_jitter_outside_the_unit_interval_is_a_bug(jitter: float) -> None:
    with pytest.raises(ValueError):
        backoff_s(1, initial_s=1, max_s=2, jitter=jitter)

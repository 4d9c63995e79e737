"""The live state a running service keeps per connection, as `status` and metrics read it."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.core.live import ServiceLive


def test_a_poll_time_is_kept_as_seconds_and_read_as_contract_text() -> None:
    live = ServiceLive("2026-04-22T08:00:00.000Z", 42, "/etc/edge-agent/config.yaml")
    conn = live.connection("PUMP-07", "modbus:10.0.0.7:502")
    assert live.snapshot()["connections"][0]["last_poll_at"] is None
    at = datetime(2026, 4, 22, 8, 0, 12, 500_000, tzinfo=UTC).timestamp()
    conn.polled(at, "17")
    conn.polled(at + 0.25, None)  # a poll that showed no boot id keeps the last one
    (shown,) = live.snapshot()["connections"]
    assert shown == {
        "device": "PUMP-07",
        "receiver": "modbus:10.0.0.7:502",
        "state": "up",
        "boot_id": "17",
        "polls": 2,
        "read_errors": 0,
        "last_error": None,
        "ticks_missed": 0,
        "problems": {},
        "last_poll_at": "2026-04-22T08:00:12.750Z",
    }


def test_ticks_passed_without_an_answer_are_counted_as_missed() -> None:
    live = ServiceLive("2026-04-22T08:00:00.000Z", 42, "/etc/edge-agent/config.yaml")
    conn = live.connection("PUMP-07", "modbus:10.0.0.7:502")
    conn.period_s = 0.25
    t = 1_000_000.0
    for gap, missed in [(0.0, 0), (0.26, 0), (0.24, 0), (0.75, 2), (0.5, 3), (0.3, 3), (2.5, 12)]:
        t += gap
        conn.polled(t, None)
        assert conn.ticks_missed == missed, (gap, missed)
    assert live.snapshot()["connections"][0]["ticks_missed"] == 12

"""What the process writes to storage, as people read it (`agent.core.wear`), and the two settings
that govern it (`store.commit_interval`, `store.write_budget`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import loader
from agent.config.store_wear import commit_interval_problem, parse_write_budget
from agent.config.units import UnitError
from agent.core import wear


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [
        ("20GB/day", 20e9 / 86400),
        ("20 GB / d", 20e9 / 86400),
        ("500MB/h", 500e6 / 3600),
        ("1MiB/s", 1024 * 1024),
        ("6GiB/hour", 6 * 1024**3 / 3600),
    ],
)
def test_a_write_budget_is_a_size_per_time(text: str, bytes_per_s: float) -> None:
    assert parse_write_budget(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text", ["20GB", "20GB/week", "/day", "0GB/day", "lots/day", 20])
def test_a_write_budget_without_a_size_per_time_is_refused(text: object) -> None:
    with pytest.raises(UnitError):
        parse_write_budget(text)


@pytest.mark.parametrize(
    ("seconds", "ok"), [(0.05, True), (0.001, True), (60.0, True), (0.0, False), (61, False)]
)
def test_the_commit_interval_has_bounds(seconds: float, ok: bool) -> None:
    assert (commit_interval_problem(seconds) is None) == ok


def test_the_store_section_takes_both(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "site: s\ngateway: g\nstore: {path: x.db, commit_interval: 1s, write_budget: 20GB/day}\n"
        "devices:\n  - name: P\n    connections: [{modbus: {host: 127.0.0.1}}]\n"
        "    channels: {Trip: {transition_id: {register: 10, type: uint32}, state: {register: 11}}}\n"
    )
    cfg = loader.load(path)
    assert cfg.store.commit_interval == 1.0
    assert cfg.store.write_budget == pytest.approx(20e9 / 86400)
    path.write_text(path.read_text().replace(", commit_interval: 1s, write_budget: 20GB/day", ""))
    assert loader.load(path).store.commit_interval == 0.05 and loader.load(path).store.write_budget is None


def test_the_rate_is_over_the_last_window_and_needs_ten_seconds() -> None:
    s = wear.WriteSamples(window_s=300)
    s.add(0.0, 1_000)
    s.add(5.0, 6_000)
    assert s.rate() is None  # 5 s of samples: too few to say
    for t in range(10, 1000, 2):
        s.add(float(t), 1_000 + t * 1_000 if t < 600 else 600_000 + (t - 600) * 10)
    bps, span = s.rate() or (0.0, 0.0)
    assert 298 <= span <= 300  # only the last five minutes
    assert bps == pytest.approx(10.0, rel=0.01)  # what was written in them, not since the start


def test_over_budget_only_with_a_budget_and_a_rate_above_it() -> None:
    assert wear.storage(10, 3, (300_000.0, 300.0), 231_481.0)["over_budget"] is True
    assert wear.storage(10, 3, (100_000.0, 300.0), 231_481.0)["over_budget"] is False
    assert wear.storage(10, 3, (300_000.0, 300.0), None)["over_budget"] is False
    assert wear.storage(10, 3, None, 231_481.0)["over_budget"] is False


def test_status_says_the_rate_in_mb_per_s_and_gb_a_day_and_what_to_change_over_budget() -> None:
    line = wear.storage_line(wear.storage(10, 3, (300_000.0, 300.0), 20e9 / 86400))
    assert line.startswith("writes to storage: 0.300 MB/s (25.92 GB a day) over the last 300 s")
    assert "OVER the write budget of 20.00 GB a day" in line and "store.commit_interval" in line
    assert wear.storage_line(wear.storage(10, 3, (1_000.0, 60.0), None)).endswith("over the last 60 s")
    assert "measuring" in wear.storage_line(wear.storage(10, 3, None, None))
    assert "not measured here" in wear.storage_line(wear.storage(None, 3, None, None))

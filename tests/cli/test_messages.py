"""What people read says `1 device`, not `1 devices`, and a far or unknown time is not a huge day count."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli.main import cli
from agent.cli.service import status_lines
from agent.core.wording import counted, days_ahead

ONE_DEVICE = """site: plant-1
gateway: gw
store:
  path: {store}
devices:
  - name: PUMP-07
    connections: [{{modbus: {{host: 10.0.0.7}}}}]
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 11}}
"""


@pytest.mark.parametrize(
    ("n", "noun", "plural", "text"),
    [
        (1, "device", None, "1 device"),
        (0, "device", None, "0 devices"),
        (2, "upstream", None, "2 upstreams"),
        (1, "redelivery", "redeliveries", "1 redelivery"),
        (3, "redelivery", "redeliveries", "3 redeliveries"),
    ],
)
def test_a_count_takes_its_noun_in_the_right_number(n: int, noun: str, plural: str | None, text: str) -> None:
    assert counted(n, noun, plural) == text


@pytest.mark.parametrize(
    ("days", "text"),
    [(None, "-"), (1.2, "1 day"), (12.0, "12 days"), (1_590_466.0, "more than 100 years")],
)
def test_days_ahead_read_as_words(days: float | None, text: str) -> None:
    assert days_ahead(days) == text


def test_check_says_one_device_and_one_connection(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(ONE_DEVICE.format(store=tmp_path / "events.db"), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "1 device (1 connection), 0 upstreams," in result.output


def test_status_shows_no_day_count_beyond_a_hundred_years() -> None:
    store = {"path": "x.db", "store_bytes": 10**5, "fs_free_bytes": 8 * 10**10, "days_that_fit": 1_590_466.0}
    lines = status_lines({"service": None, "running": False, "upstreams": [], "store": store})
    assert "  history that fits at the current rate: more than 100 years" in lines
    assert not any("1590466" in line for line in lines)

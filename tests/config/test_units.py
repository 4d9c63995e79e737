"""Units of the configuration: one duration parser and one size parser, errors with file:line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.cli.main import cli
from agent.config.loader import ConfigProblems, load
from agent.config.retention import horizon
from agent.config.store import store_retention, store_settings
from agent.config.units import parse_duration, parse_size
from agent.core.errors import ConfigError

HERE = Path(__file__).parent
DEVICE = """devices:
  - name: PUMP-07
    connections: [{modbus: {host: 10.0.0.7}}]
    channels:
      Trip:
        transition_id: {register: 10, type: uint32}
        state: {register: 11}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("30d", timedelta(days=30), id="days"),
        pytest.param("12h", timedelta(hours=12), id="hours"),
        pytest.param(" 15m ", timedelta(minutes=15), id="minutes with spaces"),
        pytest.param("1.5d", timedelta(hours=36), id="a fraction of a day"),
        pytest.param("2W", timedelta(weeks=2), id="weeks in capitals"),
        pytest.param("500ms", timedelta(milliseconds=500), id="milliseconds"),
    ],
)
def test_durations_are_read_with_their_unit(text: str, expected: timedelta) -> None:
    assert horizon(text, "k") == expected
    assert parse_duration(text) == expected.total_seconds()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("5s", 5.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        ("5S", 5.0),
        ("1d", 86400.0),
    ],
)
def test_every_spelling_a_device_or_an_upstream_took_is_still_taken(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [250, "30", "5 sec", "-1s", "", True, None])
def test_a_duration_without_a_known_unit_is_refused_as_a_config_error(bad: Any) -> None:
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration(bad)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


def test_a_horizon_option_names_the_option() -> None:
    with pytest.raises(ConfigError, match="--keys: '30' is not a duration"):
        horizon("30", "--keys")
    with pytest.raises(ConfigError, match="--keys: must be longer than zero"):
        horizon("0d", "--keys")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MB", 512 * 1000**2),
        ("2GiB", 2 * 1024**3),
        (" 1 kib ", 1024),
        ("1.5GB", 1_500_000_000),
        ("100", 100),
        ("7B", 7),
        (1048576, 1048576),
    ],
)
def test_sizes_are_read_with_their_unit(text: Any, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["2 GBs", "-1MB", "lots", True])
def test_a_size_that_is_not_understood_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="is not understood"):
        parse_size(bad)


def write(tmp_path: Path, store: str, devices: str = DEVICE) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"site: plant-1\ngateway: gw\nstore:\n{store}{devices}", encoding="utf-8")
    return path


def test_a_bad_size_or_duration_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path, "  path: /tmp/x.db\n  max_size: 2 GBs\n", DEVICE.replace("{host", "{timeout: 5, host")
    )
    with pytest.raises(ConfigProblems) as err:
        load(path)
    assert "config.yaml:5: store.max_size: size '2 GBs' is not understood" in str(err.value)
    assert "config.yaml:8: devices[0].connections[0].modbus.timeout: 5 is not a duration" in str(err.value)


def test_a_bad_retention_value_exits_78_with_file_and_line() -> None:
    case = HERE / "cases" / "a-retention-horizon-without-a-unit" / "config.yaml"
    result = CliRunner().invoke(cli, ["check", "-c", str(case)])
    assert result.exit_code == 78
    assert "config.yaml:7: store.retention.keys: 30 is not a duration" in result.output


def test_the_store_commands_read_a_config_whose_device_map_is_broken(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "  path: /tmp/x.db\n  max_size: 1GiB\n  retention: {arrivals: 5d, payloads: 10d}\n",
        "devices: 7\n",
    )
    got = store_settings(db=None, config_path=str(path), synchronous=None, max_size=None)
    assert got == ("/tmp/x.db", "FULL", 1024**3)
    assert store_retention(str(path)).payloads == timedelta(days=10)


def test_the_store_settings_name_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "  synchronous: SOMETIMES\n  max_size: huge\n  retention: {keys: 1d}\n")
    with pytest.raises(ConfigError) as err:
        store_settings(db=None, config_path=str(path), synchronous=None, max_size=None)
    text = str(err.value)
    assert "config.yaml:4: store.path: missing" in text
    assert "config.yaml:4: store.synchronous: must be one of FULL, EXTRA, NORMAL" in text
    assert "config.yaml:5: store.max_size: size 'huge' is not understood" in text
    with pytest.raises(
        ConfigError, match=r"config\.yaml:6: store\.retention\.keys: 1d must be longer than payloads"
    ):
        store_retention(str(path))


def test_options_win_over_the_config_and_name_themselves(tmp_path: Path) -> None:
    path = write(tmp_path, "  path: /tmp/x.db\n  max_size: huge\n")
    got = store_settings(db=None, config_path=str(path), synchronous="normal", max_size="2MB")
    assert got == ("/tmp/x.db", "NORMAL", 2_000_000)
    with pytest.raises(ConfigError, match="--max-db-size: size 'x' is not understood"):
        store_settings(db="/tmp/y.db", config_path=str(path), synchronous=None, max_size="x")

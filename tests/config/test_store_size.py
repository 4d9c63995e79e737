"""`store.max_size` must hold the store and its reserve: `check` and `run` refuse a smaller quota
with file:line and exit 78, instead of `run` failing at its first write in a restart loop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli.main import cli
from agent.config.store_size import DEFAULT_RESERVE, STORE_MIN_BYTES, quota_problem, smallest_quota
from agent.store.store import Store

CONFIG = """\
site: plant-1
gateway: gw
store:
  path: {db}
  max_size: {max_size}
{reserve}devices:
  - name: PUMP-07
    connections: [{{modbus: {{host: 127.0.0.1, port: 1}}}}]
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 11}}
"""


def write(tmp_path: Path, max_size: str, reserve: str | None = None) -> Path:
    extra = f"  reserve: {reserve}\n" if reserve is not None else ""
    path = tmp_path / "config.yaml"
    db = tmp_path / "events.db"
    path.write_text(CONFIG.format(db=db, max_size=max_size, reserve=extra), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("max_size", "reserve", "fits"),
    [
        pytest.param(None, DEFAULT_RESERVE, True, id="no quota always fits"),
        pytest.param(1000, DEFAULT_RESERVE, False, id="1 KB holds nothing"),
        pytest.param(smallest_quota(DEFAULT_RESERVE), DEFAULT_RESERVE, True, id="the smallest quota fits"),
        pytest.param(
            smallest_quota(DEFAULT_RESERVE) - 1, DEFAULT_RESERVE, False, id="one byte less does not"
        ),
        pytest.param(STORE_MIN_BYTES, 0, True, id="without a reserve the store alone fits"),
        pytest.param(STORE_MIN_BYTES, 4096, False, id="the reserve counts against the quota"),
    ],
)
def test_the_quota_must_hold_the_store_and_its_reserve(
    max_size: int | None, reserve: int, fits: bool
) -> None:
    assert (quota_problem(max_size, reserve) is None) == fits


async def test_the_smallest_store_is_larger_than_an_empty_store(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "empty.db")
    await store.close()
    used = os.path.getsize(tmp_path / "empty.db")  # the WAL is folded in and removed at close
    assert 0 < used < STORE_MIN_BYTES / 4, used


@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_run_refuse_a_quota_too_small_with_file_line_and_exit_78(
    tmp_path: Path, command: str
) -> None:
    cfg = write(tmp_path, "1KB")
    result = CliRunner().invoke(cli, [command, "-c", str(cfg)])
    assert result.exit_code == 78, result.output
    assert f"{cfg}:5: store.max_size: 1000 bytes cannot hold the store and its reserve" in result.output
    assert not (tmp_path / "events.db").exists()  # nothing was started


def test_a_smaller_reserve_makes_a_small_quota_acceptable(tmp_path: Path) -> None:
    refused = CliRunner().invoke(cli, ["check", "-c", str(write(tmp_path, "2MiB"))])
    assert refused.exit_code == 78, refused.output
    accepted = CliRunner().invoke(cli, ["check", "-c", str(write(tmp_path, "2MiB", reserve="512KiB"))])
    assert accepted.exit_code == 0, accepted.output

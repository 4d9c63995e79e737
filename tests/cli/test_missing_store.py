"""Commands that need an existing store, pointed at a path with none: exit 66, one line naming the
path, and nothing created (no file, no directory). Real processes, real paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CMD = [sys.executable, "-m", "agent"]
EX_NOINPUT = 66

COMMANDS = [
    pytest.param(["report"], id="report"),
    pytest.param(["report", "--json"], id="report --json"),
    pytest.param(["boots"], id="boots"),
    pytest.param(["pending", "--json"], id="pending"),
    pytest.param(["outbox"], id="outbox"),
    pytest.param(["status", "--json"], id="status"),
    pytest.param(["prune", "--dry-run"], id="prune --dry-run"),
    pytest.param(["outbox", "retry"], id="outbox retry"),
    pytest.param(["review", "conflicts"], id="review conflicts"),
    pytest.param(["review", "pending", "--csv"], id="review pending"),
    pytest.param(["review", "mark", "1", "--note", "x"], id="review mark"),
    pytest.param(["replay", "--since", "1h", "--upstream", "historian"], id="replay"),
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_store_exits_66_and_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    parent = tmp_path / "not-here"
    db = parent / "events.db"
    proc = subprocess.run(
        [*CMD, "--db", str(db), *command], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == EX_NOINPUT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0], proc.stderr
    assert not db.exists() and not parent.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_store_in_an_existing_directory_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    proc = subprocess.run([*CMD, "--db", str(db), "report"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EX_NOINPUT and str(db) in proc.stderr
    assert list(tmp_path.iterdir()) == []

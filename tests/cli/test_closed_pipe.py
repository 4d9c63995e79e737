"""Every command's output into a reader that went away (`| head -c 100`): the command stops
writing, closes the store cleanly, prints nothing on stderr and exits 141 (128 + SIGPIPE), as
the shell sees a producer killed by SIGPIPE. Real processes, real pipes, real SQLite files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CMD = [sys.executable, "-m", "agent"]
EX_PIPE = 141
EVENTS = 3000
DEVICES = 50


def _capture_lines() -> list[str]:
    """Thousands of events over many boots, and identity-incomplete arrivals for `pending`."""
    lines = []
    for n in range(EVENTS):
        device = f"PUMP-{n % DEVICES:02d}"
        line = {
            "source": f"{device}/Trip",
            "transitionId": f"T{n}",
            "bootId": f"B{n // DEVICES}",
            "sourceTimestamp": "2026-04-22T08:00:12.120Z",
            "arrivalAt": "2026-04-22T08:00:12.180Z",
            "payload": {"state": "Trip", "n": n, "note": "x" * 40},
        }
        if n % 3 == 0:
            del line["bootId"]
        lines.append(json.dumps(line))
    return lines


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("closed-pipe")
    capture = root / "capture.jsonl"
    capture.write_text("\n".join(_capture_lines()) + "\n")
    db = root / "events.db"
    subprocess.run(
        [*CMD, "--db", str(db), "import", str(capture)], capture_output=True, timeout=120, check=True
    )
    return db


def _run_into_closed_pipe(args: list[str], read_bytes: int) -> tuple[int, bytes, bytes]:
    """Run the command with stdout into a pipe whose reader closes after `read_bytes` bytes."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(args, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    got = b""
    with os.fdopen(read_end, "rb") as reader:
        while len(got) < read_bytes:
            chunk = reader.read1(read_bytes - len(got))
            if not chunk:
                break
            got += chunk
    _, err = proc.communicate(timeout=120)
    return proc.returncode, got, err


COMMANDS = [
    pytest.param(["report"], 100, id="report"),
    pytest.param(["report", "--csv"], 100, id="report --csv"),
    pytest.param(["report", "--json"], 200, id="report --json"),
    pytest.param(["boots"], 100, id="boots"),
    pytest.param(["boots", "--json"], 100, id="boots --json"),
    pytest.param(["pending"], 100, id="pending"),
    pytest.param(["pending", "--json"], 100, id="pending --json"),
    pytest.param(["outbox"], 0, id="outbox"),
    pytest.param(["prune", "--dry-run"], 0, id="prune --dry-run"),
    pytest.param(["status"], 0, id="status"),
    pytest.param(["review", "pending", "--limit", "0"], 100, id="review pending"),
    pytest.param(["review", "pending", "--json"], 100, id="review pending --json"),
    pytest.param(["review", "pending", "--csv"], 100, id="review pending --csv"),
    pytest.param(["review", "conflicts"], 0, id="review conflicts"),
]


@pytest.mark.parametrize(("command", "read_bytes"), COMMANDS)
def test_a_closed_pipe_ends_the_command_quietly_with_141(
    store_path: Path, command: list[str], read_bytes: int
) -> None:
    code, got, err = _run_into_closed_pipe([*CMD, "--db", str(store_path), *command], read_bytes)
    assert err.decode() == ""
    assert code == EX_PIPE
    assert len(got) == read_bytes
    with sqlite3.connect(store_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_import_json_into_a_closed_pipe_keeps_every_committed_batch(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n".join(_capture_lines()) + "\n")
    db = tmp_path / "events.db"
    code, got, err = _run_into_closed_pipe([*CMD, "--db", str(db), "import", str(capture), "--json"], 100)
    assert err.decode() == ""
    assert code == EX_PIPE
    assert len(got) == 100
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT count(*) FROM arrivals").fetchone()[0] > 0


def test_the_counts_in_the_capture_are_large_enough_to_fill_a_pipe(store_path: Path) -> None:
    """The pipe closes while the command still has more to write (64 KiB pipe buffer)."""
    for command in (["boots", "--json"], ["pending", "--json"]):
        out = subprocess.run(
            [*CMD, "--db", str(store_path), *command], capture_output=True, timeout=120, check=True
        ).stdout
        assert len(out) > 256 * 1024, command

"""A progress bar on stderr for `import` when a person watches a terminal; none into pipes or with
--json. The terminal is a real pseudo-terminal (`pty`), the pipe a real pipe."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.progress import Progress, wanted

CMD = [sys.executable, "-m", "agent"]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("flag", "machine", "tty", "shown"),
    [
        (None, False, True, True),
        (None, False, False, False),  # a pipe or a file
        (None, True, True, False),  # --json: output for programs
        (True, True, False, True),  # --progress asks for it
        (False, False, True, False),  # --no-progress
    ],
)
def test_a_bar_only_for_a_person_at_a_terminal(
    flag: bool | None, machine: bool, tty: bool, shown: bool
) -> None:
    assert wanted(flag, machine, Tty() if tty else io.StringIO()) is shown


def test_the_bar_is_rewritten_in_place_at_most_every_interval_and_erased_at_the_end() -> None:
    now = [0.0]
    out = io.StringIO()
    bar = Progress("import", 1000, True, out, every_s=0.2, clock=lambda: now[0])
    bar(100, 10)
    now[0] = 0.1
    bar(200, 20)  # too soon: not drawn
    now[0] = 1.0
    bar(500, 50)
    bar(1000, 100)  # the end is always drawn
    frames = out.getvalue().split("\r")[1:]
    assert [f.split("]")[1].split()[0] for f in frames] == ["10.0%", "50.0%", "100.0%"]
    assert frames[1].startswith("import [############............]")
    assert "50 lines/s" in frames[1]
    bar.finish()
    assert out.getvalue().endswith("\r" + " " * len(frames[-1].rstrip()) + "\r")


def _capture(tmp_path: Path, n: int = 3000) -> Path:
    path = tmp_path / "capture.jsonl"
    lines = (
        json.dumps({"source": f"PUMP-{i % 7}/Trip", "transitionId": i, "bootId": "B1", "payload": {"n": i}})
        for i in range(n)
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _with_stderr_on_a_terminal(args: list[str]) -> tuple[int, str, bytes]:
    """Run with stderr on a pseudo-terminal and stdout into a pipe: (exit code, stdout, terminal bytes)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=120), out, seen


@pytest.mark.timeout(120)
def test_import_on_a_terminal_draws_a_bar_and_leaves_only_its_result(tmp_path: Path) -> None:
    capture = _capture(tmp_path)
    code, out, seen = _with_stderr_on_a_terminal(
        [*CMD, "--db", str(tmp_path / "e.db"), "import", str(capture)]
    )
    assert code == 0, seen
    text = seen.decode()
    assert "import [" in text and "100.0%  3,000 lines" in text, text
    assert text.rstrip(" ").endswith("\r"), "the bar is erased at the end"
    assert out.startswith("imported 3000 lines")


@pytest.mark.timeout(120)
def test_no_bar_with_json_even_on_a_terminal(tmp_path: Path) -> None:
    capture = _capture(tmp_path, 200)
    args = [*CMD, "--db", str(tmp_path / "e.db"), "import", "--json", str(capture)]
    code, out, seen = _with_stderr_on_a_terminal(args)
    assert code == 0 and seen == b""
    assert len(out.splitlines()) == 200


@pytest.mark.timeout(120)
def test_no_bar_into_a_pipe(tmp_path: Path) -> None:
    capture = _capture(tmp_path, 200)
    proc = subprocess.run(
        [*CMD, "--db", str(tmp_path / "e.db"), "import", str(capture)], capture_output=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stderr == b""
    assert proc.stdout.decode().startswith("imported 200 lines")


@pytest.mark.timeout(120)
def test_prune_on_a_terminal_draws_a_bar_per_stage_and_none_into_a_pipe(tmp_path: Path) -> None:
    capture = tmp_path / "old.jsonl"
    lines = (
        json.dumps(
            {
                "source": "P/T",
                "transitionId": i,
                "bootId": "B1",
                "arrivalAt": "2026-01-01T00:00:00Z",
                "payload": {},
            }
        )
        for i in range(300)
    )
    capture.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"site: plant-1\ngateway: gw\nstore:\n  path: {tmp_path / 'e.db'}\n  retention: {{batch_rows: 100}}\n"
        "devices: []\n",
        encoding="utf-8",
    )
    base = [*CMD, "-c", str(config)]
    subprocess.run([*base, "import", str(capture)], check=True, capture_output=True, timeout=120)
    prune = [*base, "prune", "--now", "2030-01-01T00:00:00Z"]
    code, out, seen = _with_stderr_on_a_terminal(prune)
    assert code == 0, seen
    assert "prune arrivals [" in seen.decode() and "prune payloads [" in seen.decode()
    assert out.startswith("pruned as of 2030-01-01T00:00:00.000Z")
    piped = subprocess.run(prune, capture_output=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == b""

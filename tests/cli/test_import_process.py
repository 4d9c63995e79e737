"""`edge-agent import` of a file large enough for the parsing process (`agent.sources.parse_ahead`):
the same result lines and stored rows as parsed in one process, the clock of the lines without
arrivalAt (faketime reaches the child), and no child left behind: a child that dies is named and
every committed line is printed once; SIGTERM, Ctrl-C and a closed stdout end both processes.
Real processes, real pipes, real SQLite files."""

from __future__ import annotations

import glob
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.cli.progress import Progress
from agent.cli.records import ImportTally, import_into
from agent.sources import importer, parse_ahead
from agent.store.store import Store

pytestmark = pytest.mark.timeout(120)

CMD = [sys.executable, "-m", "agent"]
FAKETIME_LIBS = sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1")
)


def _write(path: Path, n: int) -> None:
    """`n` lines (about 200 bytes each), a third re-deliveries; every 97th without arrivalAt,
    every 101st not JSON, every 89th with no bootId, some blank."""
    with path.open("w") as f:
        for i in range(n):
            k = i if i % 3 else max(0, i - 50)
            if i % 101 == 7:
                f.write("not json {\n")
                continue
            if i % 211 == 5:
                f.write("\n")
            line: dict[str, Any] = {
                "source": f"PUMP-{k % 40:02d}/Trip",
                "transitionId": f"T{k}",
                "bootId": f"B{k // 5000}",
                "sourceTimestamp": "2026-04-22T08:00:12.120Z",
                "arrivalAt": f"2026-04-22T09:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i % 1000:03d}Z",
                "payload": {"state": "Trip" if k % 2 else "Normal", "value": k % 97, "note": "x" * 20},
            }
            if i % 97 == 3:
                del line["arrivalAt"]
            if i % 89 == 1:
                del line["bootId"]
            f.write(json.dumps(line) + "\n")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("import-process") / "big.jsonl"
    _write(path, 20_000)  # about 4 MB: the child parses all but the first batch
    assert path.stat().st_size > 3 * parse_ahead.AHEAD_MIN_BYTES
    return path


def _rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = sqlite3.connect(db)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: sorted(con.execute(f"SELECT * FROM {n}"), key=repr) for n in names if n != "store_meta"}
    finally:
        con.close()


@pytest.mark.skipif(
    not FAKETIME_LIBS or shutil.which("faketime") is None,
    reason="libfaketime not installed (apt-get install faketime)",
)
async def test_results_and_rows_are_those_of_one_process_and_the_clock_reaches_the_child(
    big: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    frozen = "2031-05-06T07:08:09.000Z"
    env = dict(
        os.environ,
        LD_PRELOAD=FAKETIME_LIBS[0],
        FAKETIME="2031-05-06 07:08:09",  # no "@": the clock stands still
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        TZ="UTC",
    )
    two = subprocess.run(
        [*CMD, "--db", str(tmp_path / "two.db"), "import", str(big), "--json", "--receiver", "rx"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert two.returncode == 0, two.stderr
    # The same file parsed in this process only, its clock standing at the same instant.
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 1 << 40)
    monkeypatch.setattr(parse_ahead, "_utc_now", lambda: datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC))
    monkeypatch.setattr(importer, "_utc_now", parse_ahead._utc_now)
    store = await Store.open(tmp_path / "one.db")
    try:
        await import_into(
            store, str(big), "rx", True, ImportTally(), Progress("import", 1, False, io.StringIO())
        )
    finally:
        await store.close()
    one = capsys.readouterr().out
    assert two.stdout == one
    assert len(one.splitlines()) == 20_000 - 20_000 // 211 - (1 if 20_000 % 211 > 5 else 0) or one
    rows_two, rows_one = _rows(tmp_path / "two.db"), _rows(tmp_path / "one.db")
    assert rows_two == rows_one
    stamps = {r[0] for r in sqlite3.connect(tmp_path / "two.db").execute("SELECT arrival_at FROM arrivals")}
    assert frozen in stamps  # the lines without arrivalAt, also those the child parsed
    late = sqlite3.connect(tmp_path / "two.db").execute(
        "SELECT count(*) FROM arrivals WHERE arrival_at = ? AND line > 1000", (frozen,)
    )
    assert late.fetchone()[0] > 100


def _children(pid: int) -> list[int]:
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.split("/")[2]))
    return out


def _child_of(proc: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kids = _children(proc.pid)
        if kids:
            return kids[0]
        time.sleep(0.01)
    raise AssertionError("no parsing process started")


def _gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # dead, waiting for its parent (itself gone or about to reap it)
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def _start(big: Path, db: Path, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CMD, "--db", str(db), "import", str(big), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_child_that_dies_is_named_and_every_committed_line_is_printed_once(
    big: Path, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    proc = _start(big, db)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the first batch is committed
    child = _child_of(proc)
    os.kill(child, signal.SIGKILL)
    rest = proc.stdout.read()  # (not communicate(): it would miss what readline buffered)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1, err
    assert "stopped after line" in err and "killed by signal 9" in err and "Traceback" not in err
    printed = [json.loads(line)["line"] for line in (first + rest).splitlines()]
    assert len(printed) == len(set(printed)) and printed == sorted(printed)
    said = int(err.split("stopped after line ")[1].split()[0])
    assert printed[-1] == said < 20_000
    con = sqlite3.connect(db)
    stored = [r[0] for r in con.execute("SELECT line FROM arrivals ORDER BY line")]
    assert stored == printed  # nothing lost, nothing doubled, nothing committed unprinted


@pytest.mark.parametrize("how", ["SIGTERM to the importer", "Ctrl-C to its process group"])
def test_stopping_the_import_leaves_no_child(big: Path, tmp_path: Path, how: str) -> None:
    proc = _start(big, tmp_path / "s.db", start_new_session=True)
    assert proc.stdout is not None
    proc.stdout.readline()
    child = _child_of(proc)
    if how.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    proc.stdout.read()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) != 0
    assert _gone(child), f"the parsing process {child} outlived the importer"
    assert "parse_ahead" not in err and "Traceback" not in err  # nothing from the child
    # Ctrl-C reaches the child too: the import stops as at Ctrl-C, not as at a child that died
    assert "stopped after line" not in err


def test_a_closed_stdout_stops_both_quietly(big: Path, tmp_path: Path) -> None:
    proc = _start(big, tmp_path / "s.db")
    assert proc.stdout is not None
    proc.stdout.readline()
    child = _child_of(proc)
    proc.stdout.close()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == ""
    assert _gone(child)

"""The file parsed ahead in a second process (`agent.sources.parse_ahead`): the same batches as
`read_batches` (every slot of every parsed line), the child only for a large regular file, a child
that dies or fails named, and `close()` leaves no process behind. Real files, real processes."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery
from agent.sources import parse_ahead
from agent.sources.importer import ImportBatch, read_batches
from agent.sources.parse_ahead import ParsedAhead, ParseProcessError, from_wire, to_wire

pytestmark = pytest.mark.timeout(60)

# Lines that take every path of the parser: integer and float ids and values, big integers
# (Python's json), offsets and lower-case timestamps, no arrivalAt, unknown fields (evidence),
# missing ids, escapes and non-ASCII text (the general canonical JSON), a lone surrogate, nesting,
# not JSON, not an object, a payload that is not an object.
EDGE = [
    '{"source": "P-07/Trip", "transitionId": 91, "bootId": "B17", "sourceTimestamp": "2026-04-22T10:00:12.120456+02:00", "payload": {"severity": "High", "v": 1.0}}',
    '{"source": "P-07/Trip", "transitionId": "91", "bootId": "B17", "sourceTimestamp": "2026-04-22t08:00:12.12z", "arrivalAt": "2026-04-22T08:00:13Z", "payload": {"v": 1, "severity": "High"}}',
    '{"source": "P-08/Trip", "transitionId": 123456789012345678901234, "bootId": "B1", "payload": {"n": 123456789012345678901234, "f": -0.0, "e": 1e300}}',
    '{"source": "P-08/Tr\\u00efp", "transitionId": "T\\ud83d\\ude00", "bootId": "B\\u00e9", "payload": {"\\u00e9": "\\u2028", "a": [1, {"b": null}], "z": true}}',
    '{"source": "P-08/Trip", "transitionId": "T1", "bootId": "B1", "extra": {"x": [1, 2]}, "payload": {}}',
    '{"source": "P-08/Trip", "transitionId": "T2", "bootId": null, "payload": {"v": 2}}',
    '{"source": "", "transitionId": 7, "payload": {"v": 2}}',
    '{"source": "P-08/Trip", "transitionId": "T3", "bootId": "B1", "payload": {"s": "\\ud800"}}',
    '{"source": "P-08/Trip", "transitionId": "T4", "bootId": "B1", "payload": [1]}',
    '{"source": "P-08/Trip", "transitionId": 9.5, "bootId": "B1"}',
    "not json",
    "[1, 2]",
    '{"source": "P-08/Trip", "transitionId": "T5", "bootId": "B1", "sourceTimestamp": "2026-02-30T08:00:12Z"}',
]


def _slots(item: Delivery | Rejection) -> list[tuple[str, Any, type]]:
    return [(name, getattr(item, name), type(getattr(item, name))) for name in type(item).__slots__]


def _parsed_edge() -> list[Delivery | Rejection]:
    items = [
        parse_delivery(text, arrival_at="2026-04-22T09:00:00.000Z", receiver="import:x", line=n)
        for n, text in enumerate(EDGE, 1)
    ]
    items.append(  # not UTF-8: the raw bytes are kept
        parse_delivery(b"\xff\xfe{}", arrival_at="2026-04-22T09:00:00.000Z", receiver="import:x", line=99)
    )
    return items


def test_a_parsed_line_crosses_the_pipe_slot_for_slot() -> None:
    items = _parsed_edge()
    assert {type(i) for i in items} == {Delivery, Rejection}
    for item in items:
        back = from_wire(marshal.loads(marshal.dumps(to_wire(item))))
        assert _slots(back) == _slots(item)
        assert back == item


def _write(path: Path, n: int, *, every: int = 7) -> None:
    """`n` lines of every kind: blank lines, CRLF ends, edge lines, and plain deliveries."""
    with path.open("wb") as f:
        for i in range(n):
            if i % every == 3:
                f.write(EDGE[i % len(EDGE)].encode() + b"\n")
            elif i % 50 == 10:
                f.write(b"\n")
            elif i % 50 == 20:
                f.write(b"\xff not UTF-8\r\n")
            else:
                line = {
                    "source": f"PUMP-{i % 30:02d}/Trip",
                    "transitionId": f"T{i}",
                    "bootId": "B1",
                    "sourceTimestamp": "2026-04-22T08:00:12.120Z",
                    "arrivalAt": "2026-04-22T09:00:00.000Z",
                    "payload": {"state": "Trip", "n": i},
                }
                f.write(json.dumps(line).encode() + b"\r\n")


def _same(a: list[ImportBatch], b: list[ImportBatch], clock_free: bool = True) -> None:
    assert [(x.lines, x.bytes_read) for x in a] == [(x.lines, x.bytes_read) for x in b]
    for x, y in zip(a, b, strict=True):
        for i, j in zip(x.items, y.items, strict=True):
            if clock_free and i.arrival_at != j.arrival_at:
                # a line without arrivalAt: "now", read per batch in each process
                assert type(i) is type(j)
                continue
            assert _slots(i) == _slots(j)


def test_the_child_parses_the_same_batches_as_read_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    _write(path, 700)
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    ahead = ParsedAhead(path, receiver="rx", batch_lines=64)
    try:
        got = [next(ahead)]
        assert ahead.child_pid is not None  # the rest from the child
        got += list(ahead)
    finally:
        ahead.close()
    want = list(read_batches(path, receiver="rx", batch_lines=64))
    assert len(want) > 5
    _same(got, want)


def test_a_small_file_is_parsed_here(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    _write(path, 700)
    assert path.stat().st_size < parse_ahead.AHEAD_MIN_BYTES
    _assert_parsed_here(path)


def test_lines_without_arrival_at_get_the_childs_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(f'{{"source": "P/Trip", "transitionId": "T{i}", "bootId": "B"}}\n' for i in range(50))
    )
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    before = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    ahead = ParsedAhead(path, batch_lines=10)
    try:
        batches = list(ahead)
    finally:
        ahead.close()
    after = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    stamps = {item.arrival_at for b in batches for item in b.items}
    assert all(before <= s <= after for s in stamps), (before, stamps, after)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie not yet reaped by us would still answer; ParsedAhead reaps its child
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1].startswith("Z")


def test_a_child_killed_is_named_after_the_batches_it_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    _write(path, 30_000)  # about 3 MB: more than the pipe holds, so the child cannot be done
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    ahead = ParsedAhead(path, batch_lines=500)
    try:
        first, second = next(ahead), next(ahead)
        pid = ahead.child_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        last = second.lines[-1]
        with pytest.raises(
            ParseProcessError, match=r"stopped after line \d+ \(killed by signal 9\)"
        ) as caught:
            while True:
                last = next(ahead).lines[-1]  # what was already in the pipe, whole batches only
        assert f"after line {last} " in str(caught.value)
        assert last < 30_000
        assert first.lines[0] == 1
        assert _gone(pid)
    finally:
        ahead.close()


def test_an_error_in_the_child_is_sent_with_its_reason(tmp_path: Path) -> None:
    """The child reading something that is not a file: its error comes back as a message."""
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "agent.sources.parse_ahead", str(fd), "0", "1", "rx", "10"],
            pass_fds=(fd,),
            capture_output=True,
            timeout=30,
        )
    finally:
        os.close(fd)
    assert out.returncode == 1
    size = int.from_bytes(out.stdout[:8], "little")
    assert marshal.loads(out.stdout[8 : 8 + size]).startswith("IsADirectoryError")
    assert out.stderr == b""


def test_close_stops_the_child_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "in.jsonl"
    _write(path, 30_000)
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    ahead = ParsedAhead(path, batch_lines=500)
    next(ahead)
    pid = ahead.child_pid
    assert pid is not None
    t0 = time.monotonic()
    ahead.close()
    assert time.monotonic() - t0 < 5
    assert _gone(pid)
    assert ahead.child_pid is None
    with pytest.raises(StopIteration):
        next(ahead)
    ahead.close()  # again: nothing


def test_on_one_core_the_file_is_parsed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second process only helps beside this one; with one core it only adds its own work."""
    path = tmp_path / "in.jsonl"
    _write(path, 700)
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    _assert_parsed_here(path)


def test_the_child_runs_nicer_than_the_importer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _child_running(tmp_path, monkeypatch) as (_, pid):
        want = min(19, os.nice(0) + parse_ahead.CHILD_NICE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/stat") as f:
                nice = int(f.read().rsplit(")", 1)[1].split()[16])
            if nice == want:
                break
            time.sleep(0.01)
        assert nice == want


def test_a_child_stopped_by_ctrl_c_stops_the_import_as_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reaches the whole process group; if the parent sees its child end first, it stops
    as at Ctrl-C (click: "Aborted!"), not as at a child that died."""
    with _child_running(tmp_path, monkeypatch) as (ahead, pid):
        os.kill(pid, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            while True:
                next(ahead)
        assert _gone(pid)


def test_with_no_interpreter_to_start_the_file_is_parsed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    _write(path, 700)
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    ahead = ParsedAhead(path, batch_lines=64)
    try:
        got = list(ahead)
        assert ahead.child_pid is None
    finally:
        ahead.close()
    _same(got, list(read_batches(path, batch_lines=64)))


def _assert_parsed_here(path: Path) -> None:
    """Every batch parsed in this process (no child ever), the same as `read_batches`'."""
    ahead = ParsedAhead(path, batch_lines=64)
    try:
        got = []
        for batch in ahead:
            assert ahead.child_pid is None
            got.append(batch)
    finally:
        ahead.close()
    _same(got, list(read_batches(path, batch_lines=64)))


@contextlib.contextmanager
def _child_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ParsedAhead, int]]:
    """A 30,000-line file being parsed by a child (its first batch taken here), and the child's pid."""
    path = tmp_path / "in.jsonl"
    _write(path, 30_000)
    monkeypatch.setattr(parse_ahead, "AHEAD_MIN_BYTES", 0)
    ahead = ParsedAhead(path, batch_lines=500)
    try:
        next(ahead)
        pid = ahead.child_pid
        assert pid is not None
        yield ahead, pid
    finally:
        ahead.close()

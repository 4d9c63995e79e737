"""The prune's archive files (`agent.ledger.archive`) without a database: written by `DayWriter`,
checked by `verify` against their manifests, down to every line being a JSON object."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from agent.ledger import archive


def written(tmp_path: Path, lines: list[str]) -> Path:
    w = archive.DayWriter(tmp_path, "arrival", 7, "id", "test", unit="partition")
    for i, line in enumerate(lines, 1):
        w.add("p1", i, f"2026-01-01T00:00:0{i}+00:00", line)
    (f,) = w.finish()
    return f


def remade(data: Path, lines: list[bytes]) -> None:
    """The data file replaced by `lines`, its manifest's size and digest made to match, so only
    the lines themselves can fail."""
    data.write_bytes(gzip.compress(b"".join(lines), mtime=0))
    m = data.with_name(data.name + archive.MANIFEST)
    manifest = json.loads(m.read_text())
    manifest["bytes"] = data.stat().st_size
    manifest["sha256"] = hashlib.sha256(data.read_bytes()).hexdigest()
    m.write_text(json.dumps(manifest))


def test_a_written_file_verifies_and_names_its_rows(tmp_path: Path) -> None:
    f = written(tmp_path, ['{"id": 1, "raw": "\\\\x00"}', '{"id": 2, "note": "Grüße"}'])
    assert archive.verify(f) == []
    assert [json.loads(x)["id"] for x in gzip.decompress(f.read_bytes()).splitlines()] == [1, 2]
    manifest = json.loads(f.with_name(f.name + archive.MANIFEST).read_text())
    assert (manifest["rows"], manifest["first_id"], manifest["last_id"]) == (2, 1, 2)


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ([b'{"id": 1}\n', b"not json\n"], "cannot be read"),
        ([b'{"id": 1}\n', b"[2]\n"], "line 2 is not a JSON object"),
        ([b'{"id": 1}\n'], "1 rows, the manifest says 2"),
        ([b'{"id": 1}\n', b'{"id": 3}\n'], "first or last id differs"),
    ],
)
def test_a_file_whose_lines_are_not_the_rows_fails(tmp_path: Path, lines: list[bytes], problem: str) -> None:
    f = written(tmp_path, ['{"id": 1}', '{"id": 2}'])
    remade(f, lines)
    problems = archive.verify(f)
    assert any(problem in p for p in problems), problems

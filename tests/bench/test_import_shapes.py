"""The import bench's generated files have the shapes its docstring names (bench/import_shapes.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.import_shapes import SHAPES, write_shape  # noqa: E402


def _rows(tmp_path: Path, shape: str, n: int = 2000) -> list[dict[str, object]]:
    file = tmp_path / f"{shape}.jsonl"
    write_shape(file, n, shape)
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_has_half_its_lines_re_deliveries_of_earlier_keys(tmp_path: Path, shape: str) -> None:
    rows = _rows(tmp_path, shape)
    keys = [(r["source"], r["transitionId"], r["bootId"]) for r in rows]
    assert len(set(keys)) == len(rows) // 2
    seen: set[object] = set()
    for i, key in enumerate(keys):
        assert (key in seen) == (i % 2 == 1)  # a re-delivery only ever repeats an earlier line
        seen.add(key)


def test_today_repeats_recent_keys_and_spread_keys_from_the_whole_history(tmp_path: Path) -> None:
    def distance(rows: list[dict[str, object]]) -> list[int]:
        first = {}
        out = []
        for i, r in enumerate(rows):
            key = (r["source"], r["transitionId"], r["bootId"])
            if key in first:
                out.append(i - first[key])
            else:
                first[key] = i
        return out

    assert max(distance(_rows(tmp_path, "today"))) <= 101
    spread = distance(_rows(tmp_path, "spread"))
    assert sum(d > 500 for d in spread) > len(spread) // 4  # many reach far back


def test_outsider_has_floats_non_ascii_several_boots_and_re_deliveries_written_otherwise(
    tmp_path: Path,
) -> None:
    file = tmp_path / "o.jsonl"
    write_shape(file, 2000, "outsider")
    text = file.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    assert any(type(v) is float for r in rows for v in r["payload"].values())  # type: ignore[union-attr]
    assert not text.isascii() and "\\u" in text  # raw and escaped non-ASCII
    boots: dict[object, set[object]] = {}
    for r in rows:
        boots.setdefault(r["source"], set()).add(r["bootId"])
    assert min(len(b) for b in boots.values()) >= 2
    first: dict[object, str] = {}
    differ = 0
    for line, r in zip(text.splitlines(), rows, strict=True):
        key = (r["source"], r["transitionId"], r["bootId"])
        differ += key in first and first[key] != line
        first.setdefault(key, line)
    assert differ == len(rows) // 2  # every re-delivery is other text for the same event

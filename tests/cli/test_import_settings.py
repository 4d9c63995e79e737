"""What `import` changes in the interpreter while a file is imported (the switch interval and the
cyclic collector's threshold, see `agent.cli.records.import_into`), and that both come back."""

from __future__ import annotations

import gc
import io
import json
import sys
from pathlib import Path

import pytest

from agent.cli.progress import Progress
from agent.cli.records import IMPORT_GC_THRESHOLD, IMPORT_SWITCH_INTERVAL_S, ImportTally, import_into
from agent.store.store import Store


class Watching(Progress):
    """Notes the interpreter's settings each time a batch is reported."""

    def __init__(self) -> None:
        super().__init__("import", 1, False, io.StringIO())
        self.seen: list[tuple[int, float]] = []

    def __call__(self, done: int, count: int) -> None:
        self.seen.append((gc.get_threshold()[0], sys.getswitchinterval()))


def _file(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


LINE = json.dumps({"source": "P-1/Trip", "transitionId": "T1", "bootId": "B1", "payload": {"v": 1}})


async def test_import_raises_the_collector_threshold_and_restores_it(tmp_path: Path) -> None:
    before = gc.get_threshold(), sys.getswitchinterval()
    bar = Watching()
    async with await Store.open(tmp_path / "s.db") as store:
        await import_into(store, _file(tmp_path, [LINE, LINE]), None, False, ImportTally(), bar)
    assert bar.seen == [(IMPORT_GC_THRESHOLD, IMPORT_SWITCH_INTERVAL_S)]
    assert (gc.get_threshold(), sys.getswitchinterval()) == before


async def test_a_failed_import_restores_them_too(tmp_path: Path) -> None:
    before = gc.get_threshold(), sys.getswitchinterval()
    store = await Store.open(tmp_path / "s.db")
    await store.close()  # the first record fails: the connection is closed
    with pytest.raises(ValueError):
        await import_into(store, _file(tmp_path, [LINE]), None, False, ImportTally(), Watching())
    assert (gc.get_threshold(), sys.getswitchinterval()) == before

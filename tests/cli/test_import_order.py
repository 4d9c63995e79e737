"""`import` takes a batch (parses it, or receives it from the parsing process) only once the batch
before it is committed, and prints each batch's results after its commit (see
`agent.cli.records.import_into`)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.cli import records
from agent.cli.progress import Progress
from agent.cli.records import ImportTally, import_into
from agent.core import decide
from agent.sources.importer import ImportBatch
from agent.sources.parse_ahead import ParsedAhead
from agent.store.store import Store


async def test_a_batch_is_parsed_after_the_one_before_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(
            json.dumps({"source": "P-1/Trip", "transitionId": f"T{i}", "bootId": "B1", "payload": {}}) + "\n"
            for i in range(5)
        )
    )
    log: list[str] = []

    class SmallBatches(ParsedAhead):
        def __init__(self, file: str, *, receiver: str | None = None) -> None:
            super().__init__(file, receiver=receiver, batch_lines=2)

        def __next__(self) -> ImportBatch:
            batch = super().__next__()
            log.append(f"parsed {batch.lines[0]}")
            return batch

    class Printing(Progress):
        def __call__(self, done: int, count: int) -> None:
            log.append(f"printed {count}")

    monkeypatch.setattr(records, "ParsedAhead", SmallBatches)
    store = await Store.open(str(tmp_path / "s.db"))
    record = store.record

    async def logged(items: Sequence[Any], **kw: Any) -> list[decide.Outcome]:
        log.append(f"record {items[0].line}")
        out = await record(items, **kw)
        log.append(f"committed {items[0].line}")
        return out

    monkeypatch.setattr(store, "record", logged)
    try:
        await import_into(
            store, str(path), None, False, ImportTally(), Printing("import", 1, False, io.StringIO())
        )
    finally:
        await store.close()
    at = log.index
    # the next batch's parse may run before or beside the printing, never before the commit
    assert at("committed 1") < at("parsed 3") < at("record 3") < at("committed 3") < at("parsed 5")
    assert at("committed 1") < at("printed 2") < at("record 3")
    assert at("committed 3") < at("printed 4") < at("record 5") < at("committed 5") < at("printed 5")
    assert len(log) == 12

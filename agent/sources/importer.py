"""The offline importer: a JSON Lines capture file into the store, streamed in batches.

Every non-blank line is one delivery, live, in file order (the file is a
capture). Lines are read, parsed and decided in batches (group commit); the
results of a batch are handed out only after that batch is committed, so a
result the caller prints is a promise that survives a crash.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from agent.core.contract import Delivery, Rejection, format_timestamp
from agent.core.decide import Outcome
from agent.core.intake import parse_delivery
from agent.store.store import Store

BATCH_LINES = 1000


@dataclass(frozen=True, slots=True)
class LineResult:
    line: int
    outcome: Outcome


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _strip(raw: bytes, line_no: int) -> bytes:
    raw = raw.rstrip(b"\r\n")
    if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte order mark, as Windows tools write it
    return raw


async def import_file(
    store: Store,
    path: str | Path,
    *,
    receiver: str | None = None,
    clock: Callable[[], datetime] = _utc_now,
    batch_lines: int = BATCH_LINES,
    on_progress: Callable[[int, int], None] | None = None,
) -> AsyncIterator[list[LineResult]]:
    """Import `path`; yields the results of each committed batch, in line order.

    `on_progress(bytes_read, lines_read)` is called after each batch. Raises
    StoreError (nothing of the failing batch is committed) when the store
    cannot be written.
    """
    who = receiver or f"import:{os.path.basename(str(path))}"
    with open(path, "rb") as f:
        for batch, lines in _batches(f, who, clock, batch_lines):
            outcomes = await store.record(batch)
            yield [LineResult(n, oc) for n, oc in zip(lines, outcomes, strict=True)]
            if on_progress:
                on_progress(f.tell(), lines[-1])


def _batches(
    f: BinaryIO, who: str, clock: Callable[[], datetime], batch_lines: int
) -> Iterator[tuple[list[Delivery | Rejection], list[int]]]:
    batch: list[Delivery | Rejection] = []
    lines: list[int] = []
    arrival = ""
    for line_no, raw in enumerate(f, 1):
        data = _strip(raw, line_no)
        if not data.strip():
            continue
        if not batch:
            # arrivalAt for lines without one: when the gateway read them (once per batch).
            arrival = format_timestamp(clock())
        text: str | bytes
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data  # rejected by the parser, raw bytes kept
        batch.append(parse_delivery(text, arrival_at=arrival, receiver=who, line=line_no))
        lines.append(line_no)
        if len(batch) >= batch_lines:
            yield batch, lines
            batch, lines = [], []
    if batch:
        yield batch, lines

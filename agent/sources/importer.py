"""The offline importer, a source: a JSON Lines capture file parsed into batches of deliveries.

Every non-blank line is one delivery (or a rejection), live, in file order (the file is a
capture). It never writes the store: the caller records each batch and only then reports its
results, so a result it prints is a promise that survives a crash.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery
from agent.core.timestamps import format_timestamp

BATCH_LINES = 1000


@dataclass(frozen=True, slots=True)
class ImportBatch:
    """Parsed lines of one batch, their line numbers, and how far into the file it reaches."""

    items: list[Delivery | Rejection]
    lines: list[int]
    bytes_read: int


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _strip(raw: bytes, line_no: int) -> bytes:
    raw = raw.rstrip(b"\r\n")
    if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte order mark, as Windows tools write it
    return raw


def read_batches(
    path: str | Path,
    *,
    receiver: str | None = None,
    clock: Callable[[], datetime] = _utc_now,
    batch_lines: int = BATCH_LINES,
) -> Iterator[ImportBatch]:
    """The file `path` as batches of at most `batch_lines` parsed lines, streamed in file order."""
    who = receiver or f"import:{os.path.basename(str(path))}"
    with open(path, "rb") as f:
        for items, lines in _batches(f, who, clock, batch_lines):
            yield ImportBatch(items, lines, f.tell())


def _batches(
    f: BinaryIO, who: str, clock: Callable[[], datetime], batch_lines: int, first_line: int = 1
) -> Iterator[tuple[list[Delivery | Rejection], list[int]]]:
    """Parsed batches of the lines from `f`'s position on; that position's line is `first_line`."""
    batch: list[Delivery | Rejection] = []
    lines: list[int] = []
    arrival = ""
    for line_no, raw in enumerate(f, first_line):
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

"""The reference writer of the ledger's arrival COPY text: every row value by value through
`_cell` (the writer before `agent.ledger.arrival_rows.copy_text`), the tests' oracle."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent.core import decide
from agent.ledger.arrival_rows import _line_by_cell
from agent.ledger.arrivals import Arrival


def copy_text_by_cell(
    batch: Sequence[Arrival],
    outcomes: list[decide.Outcome],
    ids: list[int],
    keys: list[bytes],
    now: datetime,
) -> bytes:
    received = now.isoformat()
    lines = [
        _line_by_cell(aid, arr, oc, key, received)
        for aid, arr, oc, key in zip(ids, batch, outcomes, keys, strict=True)
    ]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")

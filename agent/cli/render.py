"""Text tables for people. Pure: rows in, lines out (the CLI prints them)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


def cell(value: Any, width: int | None = None) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, dict) and "summary" in value:
        text = str(value["summary"])
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    if width is not None and len(text) > width:
        text = text[: max(1, width - 1)] + "…"
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], max_width: int = 48) -> list[str]:
    """Align columns; long cells are cut with an ellipsis at `max_width`."""
    body = [[cell(v, max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in body:
        lines.append("  ".join(t.ljust(w) for t, w in zip(row, widths, strict=True)).rstrip())
    return lines


def summary_lines(summary: dict[str, int]) -> list[str]:
    s = summary
    return [
        f"source events (canonical): {s['source_events']}",
        f"arrivals:                  {s['arrivals']}  (inserted {s['inserted']}, duplicate {s['duplicates']},"
        f" conflict {s['conflicts']}, identity_incomplete {s['identity_incomplete']},"
        f" rejected {s['rejected']})",
        f"boots observed:            {s['boots']}",
        f"gaps / anomalies:          {s['gaps']} / {s['anomalies']}",
        f"delivery attempts:         {s['delivery_attempts']}",
    ]


EVENT_COLUMNS = (
    ("id", "canonical_id"),
    ("source", "source"),
    ("transitionId", "transitionId"),
    ("bootId", "bootId"),
    ("basis", "identity_basis"),
    ("sourceTimestamp", "sourceTimestamp"),
    ("first arrivalAt", "first_arrival"),
    ("last arrivalAt", "last_arrival"),
    ("status", "status"),
    ("dup", "duplicate_count"),
    ("conf", "conflict_count"),
    ("payload", "payload"),
)

ARRIVAL_COLUMNS = (
    ("arrival", "arrival_id"),
    ("line", "line"),
    ("source", "source"),
    ("transitionId", "transitionId"),
    ("bootId", "bootId"),
    ("basis", "identity_basis"),
    ("sourceTimestamp", "sourceTimestamp"),
    ("arrivalAt", "arrivalAt"),
    ("receiver", "receiver"),
    ("reason", "reason"),
)

BOOT_COLUMNS = (
    ("device", "device"),
    ("bootId", "bootId"),
    ("previous", "previous_bootId"),
    ("first arrivalAt", "first_arrival"),
    ("sourceTimestamp", "sourceTimestamp"),
    ("live", "live"),
    ("evidence", "evidence"),
)

ANOMALY_COLUMNS = (
    ("source", "source"),
    ("bootId", "bootId"),
    ("kind", "kind"),
    ("from", "from"),
    ("to", "to"),
    ("detected_at", "detected_at"),
)


def rows_of(records: Iterable[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> list[list[Any]]:
    return [[r.get(field) for _, field in columns] for r in records]


def headers_of(columns: Sequence[tuple[str, str]]) -> list[str]:
    return [h for h, _ in columns]

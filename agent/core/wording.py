"""Words for people: a count with its noun in the right number, a span of days that reads.

Pure text; it must not log, print or know where the words go (CLI text, log lines, systemd status).
"""

from __future__ import annotations

FAR_FUTURE_DAYS = 36_500  # beyond a hundred years a day count is noise, not information


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 device`, `2 devices`; `plural` for nouns that do not just take an s (`1 entry`, `2 entries`)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def days_ahead(days: float | None) -> str:
    """A number of days to come: `-` when unknown, `1 day`, `12 days`, `more than 100 years`."""
    if days is None:
        return "-"
    if days > FAR_FUTURE_DAYS:
        return "more than 100 years"
    return counted(round(days), "day")

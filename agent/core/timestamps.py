"""Timestamps of the contract (docs/contract.md): RFC 3339 with an offset, normalised to a UTC
instant with millisecond precision (finer digits truncated, never rounded). Pure."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from agent.core.contract import ContractError, json_type_name

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def parse_timestamp(text: Any, name: str) -> datetime:
    """Parse RFC 3339 with an offset into an aware UTC datetime, truncated to milliseconds."""
    if not isinstance(text, str):
        raise ContractError(f"{name} must be an RFC 3339 text with offset, got {json_type_name(text)}")
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ContractError(f"{name} {text!r} is not RFC 3339 with offset (e.g. 2026-04-22T08:00:12.120Z)")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    millis = int((m.group(7) or "0")[:3].ljust(3, "0"))
    if m.group(8):
        tz = UTC
    else:
        off_h, off_m = int(m.group(10)), int(m.group(11))
        if off_h > 23 or off_m > 59:
            raise ContractError(f"{name} {text!r} has an impossible UTC offset")
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=off_h, minutes=off_m))
    try:
        # A leap second (:60) cannot be held by datetime; it is a real but rare
        # RFC 3339 value, so it is taken as the last millisecond of that minute.
        if second == 60:
            dt = datetime(year, month, day, hour, minute, 59, 999_000, tzinfo=tz)
        else:
            dt = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
        return dt.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ContractError(f"{name} {text!r} is not a valid date and time: {exc}") from exc


def format_timestamp(dt: datetime) -> str:
    """RFC 3339 UTC with milliseconds: `2026-04-22T08:00:12.180Z`."""
    if dt.tzinfo is None:
        raise ValueError("naive datetimes are not instants")
    u = dt.astimezone(UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f".{u.microsecond // 1000:03d}Z"
    )


def normalize_timestamp(text: Any, name: str) -> str | None:
    """Normalised text of an optional timestamp (None stays None)."""
    if text is None:
        return None
    # Already in normal form (the common case), every field in its range: only a day past the
    # 28th, or the year 0000, needs the date's own check (dates repeat: it is cached). Else the
    # full parse, for the message (or the leap second rule).
    if (
        type(text) is str
        and _NORMAL_RANGED.fullmatch(text) is not None
        and ((text[8:10] <= "28" and not text.startswith("0000")) or _date_exists(text[:10]))
    ):
        return text
    return format_timestamp(parse_timestamp(text, name))


_NORMAL_RANGED = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)


@lru_cache(maxsize=4096)
def _date_exists(date: str) -> bool:
    """`YYYY-MM-DD` (digits) names a day of the calendar."""
    try:
        datetime(int(date[:4]), int(date[5:7]), int(date[8:10]))
    except ValueError:
        return False
    return True

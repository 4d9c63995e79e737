"""What the store costs the gateway's flash: the commit interval and the write budget (pure).

`store.commit_interval` (a duration, default 50 ms): the recorder commits at most this often.
Every commit writes whole pages (each page a transaction touches is one WAL frame, and the
checkpoint writes it again), so fewer, larger commits write fewer bytes per event; the price is
the latency to the store and upstream (docs/operations.md, "Flash").

`store.write_budget` (optional, e.g. `20GB/day`): what the operator allows the process to write
to storage; above it `status` says so and the metrics expose it for an alert.
"""

from __future__ import annotations

import re
from typing import Any

from agent.config.units import UnitError, parse_size

DEFAULT_COMMIT_INTERVAL = 0.05
MIN_COMMIT_INTERVAL = 0.001
MAX_COMMIT_INTERVAL = 60.0

_PER = {
    "s": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_BUDGET = re.compile(r"\s*(.+?)\s*/\s*([a-z]+)\s*", re.IGNORECASE)


def commit_interval_problem(seconds: float) -> str | None:
    """Why `seconds` cannot be the commit interval, or None."""
    if MIN_COMMIT_INTERVAL <= seconds <= MAX_COMMIT_INTERVAL:
        return None
    return (
        f"{seconds:g}s is outside {MIN_COMMIT_INTERVAL * 1000:g}ms..{MAX_COMMIT_INTERVAL:g}s"
        " (longer holds transitions in memory for too long; 1s to 5s spares the flash most)"
    )


def parse_write_budget(value: Any) -> float:
    """``20GB/day``, ``500MB/h``, ``1MiB/s`` -> bytes per second (sizes as `parse_size`)."""
    m = _BUDGET.fullmatch(value) if isinstance(value, str) else None
    per = _PER.get(m.group(2).lower()) if m else None
    if m is None or per is None:
        raise UnitError(
            f"write budget {value!r} is not understood; write a size per time, e.g. 20GB/day or 1MB/s"
        )
    size = parse_size(m.group(1))
    if size <= 0:
        raise UnitError(f"write budget {value!r} must be more than nothing")
    return size / per

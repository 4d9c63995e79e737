"""What every bench shares: agent and baseline rounds alternated, medians, peak RSS.

Rounds alternate ABBA-style (agent first in even rounds, baseline first in odd ones), so a
slow spell of a shared machine falls on both sides; figures are the medians of the rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def alternate(rounds: int, agent: Callable[[], T], baseline: Callable[[], T]) -> tuple[list[T], list[T]]:
    """`rounds` results of each, run alternated."""
    a: list[T] = []
    b: list[T] = []
    for r in range(rounds):
        if r % 2 == 0:
            a.append(agent())
            b.append(baseline())
        else:
            b.append(baseline())
            a.append(agent())
    return a, b


async def alternate_async(
    rounds: int, agent: Callable[[], Awaitable[T]], baseline: Callable[[], Awaitable[T]]
) -> tuple[list[T], list[T]]:
    """`alternate` for coroutines."""
    a: list[T] = []
    b: list[T] = []
    for r in range(rounds):
        if r % 2 == 0:
            a.append(await agent())
            b.append(await baseline())
        else:
            b.append(await baseline())
            a.append(await agent())
    return a, b


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def ratio(agent_rates: Sequence[float], baseline_rates: Sequence[float]) -> float:
    """Median agent rate over median baseline rate, 3 decimals."""
    return round(median(agent_rates) / median(baseline_rates), 3)


def proc_status_mb(field: str, pid: int | str = "self") -> float:
    """A /proc/<pid>/status figure in MB (VmRSS now, VmHWM the peak); 0.0 when not readable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb() -> float:
    return proc_status_mb("VmRSS")


def rss_peak_mb() -> float:
    return proc_status_mb("VmHWM")

"""What the process writes to storage, as people read it: a rate, GB a day, a budget (pure).

A gateway's flash endures a fixed volume of writes, so the service samples what the process
caused to be written to storage (Linux `/proc/self/io` `write_bytes`: WAL frames, checkpoints,
the store's growth) every time it writes its live state, and keeps the samples of the last
`RATE_WINDOW_S`. The rate over that window is what `status` shows (MB/s and GB a day) and what
is held against `store.write_budget`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

DAY_S = 86400.0
RATE_WINDOW_S = 300.0  # what `status` calls "the last minutes"
MIN_SPAN_S = 10.0  # fewer seconds of samples than this give no rate yet


class WriteSamples:
    """(monotonic seconds, bytes written so far) of the last `window_s`; the rate over them."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at_s: float, written: int) -> None:
        self._samples.append((at_s, written))
        while len(self._samples) > 2 and at_s - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def rate(self) -> tuple[float, float] | None:
        """(bytes per second, seconds it was measured over), or None before `MIN_SPAN_S`."""
        if len(self._samples) < 2:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        span = t1 - t0
        if span < MIN_SPAN_S:
            return None
        return max(0, b1 - b0) / span, span


def storage(
    written: int | None, commits: int, rate: tuple[float, float] | None, budget_bps: float | None
) -> dict[str, Any]:
    """The `storage` part of the live state (status, metrics)."""
    bps = None if rate is None else round(rate[0], 1)
    return {
        "written_bytes": written,
        "commits": commits,
        "rate_bytes_per_s": bps,
        "rate_window_s": None if rate is None else round(rate[1]),
        "budget_bytes_per_s": budget_bps,
        "over_budget": bps is not None and budget_bps is not None and bps > budget_bps,
    }


def per_day(bytes_per_s: float) -> str:
    return f"{bytes_per_s * DAY_S / 1e9:.2f} GB a day"


def storage_line(figures: dict[str, Any]) -> str:
    """One line for `status`: the write rate and, with a budget, where it stands."""
    bps = figures.get("rate_bytes_per_s")
    if figures.get("written_bytes") is None:
        return "writes to storage: not measured here (no /proc/self/io)"
    if bps is None:
        text = "writes to storage: measuring (a rate needs 10 s of samples)"
    else:
        window = int(figures.get("rate_window_s") or 0)
        text = f"writes to storage: {bps / 1e6:.3f} MB/s ({per_day(bps)}) over the last {window} s"
    budget = figures.get("budget_bytes_per_s")
    if budget is not None:
        if figures.get("over_budget"):
            text += (
                f"; OVER the write budget of {per_day(budget)}: raise store.commit_interval, poll fewer"
                " channels or prune sooner (docs/operations.md, Flash)"
            )
        else:
            text += f"; budget {per_day(budget)}"
    return text

"""The delivery window of a Sparkplug upstream (pure; spec sparkplug.md section 5).

No Sparkplug host acknowledges data, so a published row counts as delivered only once a
window W = 2 x keepalive has passed with the session unbroken (no disconnect, no NDEATH,
no offline STATE, no rebirth request). `broken()` forgets every row still inside the window:
those rows are still pending in the store, so they go out again (flagged historical) after
the next births. Memory: one entry per published batch: its time and its outbox ids as an
array of 8-byte integers (a million rows inside the window hold 8 MB, not 36).
"""

from __future__ import annotations

import collections
from array import array


class DeliveryWindow:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._batches: collections.deque[tuple[float, array[int]]] = collections.deque()
        self.rows = 0

    def published(self, at: float, ids: list[int]) -> None:
        """Rows `ids` were published at monotonic time `at` (later than any before)."""
        if ids:
            self._batches.append((at, array("q", ids)))
            self.rows += len(ids)

    def due(self, now: float) -> list[int]:
        """The rows whose window has passed by `now`: delivered (and out of the window)."""
        out: list[int] = []
        limit = now - self.window_s
        while self._batches and self._batches[0][0] <= limit:
            out.extend(self._batches.popleft()[1])
        self.rows -= len(out)
        return out

    def next_due(self) -> float | None:
        """When the oldest row in the window becomes due (None: the window is empty)."""
        return self._batches[0][0] + self.window_s if self._batches else None

    def broken(self) -> int:
        """The session broke: every row in the window is sent again later. Returns how many."""
        n = self.rows
        self._batches.clear()
        self.rows = 0
        return n

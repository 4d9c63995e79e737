"""A progress bar on stderr for long commands, shown only to a person at a terminal.

`wanted` decides: an explicit --progress/--no-progress wins; otherwise a bar only when stderr is
a terminal and the output is not for a program (--json). The bar is one line rewritten in place
(carriage return), at most a few times a second, and erased at the end, so what stays on the
screen is the command's own result. A command calls the bar with how far it is; nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 24


def wanted(flag: bool | None, machine_output: bool, stream: TextIO) -> bool:
    """Whether to show a bar: the flag when given, else a terminal on `stream` and people's output."""
    if flag is not None:
        return flag
    try:
        return stream.isatty() and not machine_output
    except (ValueError, OSError):  # a closed or odd stream: no bar
        return False


class Progress:
    """`bar(done, count)`: `done` of `total` (bytes, rows) finished, `count` things handled so far."""

    def __init__(
        self,
        label: str,
        total: int,
        enabled: bool,
        stream: TextIO,
        *,
        unit: str = "lines",
        every_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.enabled, self.stream = label, max(total, 1), enabled, stream
        self.unit, self.every_s, self.clock = unit, every_s, clock
        self.start = clock()
        self.last_at: float | None = None
        self.width = 0

    def line(self, done: int, count: int, elapsed: float) -> str:
        frac = min(max(done / self.total, 0.0), 1.0)
        filled = int(frac * WIDTH)
        rate = f"  {count / elapsed:,.0f} {self.unit}/s" if elapsed >= 0.5 else ""
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"{self.label} [{bar}] {100 * frac:5.1f}%  {count:,} {self.unit}{rate}"

    def __call__(self, done: int, count: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self.last_at is not None and now - self.last_at < self.every_s and done < self.total:
            return
        self.last_at = now
        text = self.line(done, count, now - self.start)
        self._write("\r" + text.ljust(self.width))
        self.width = len(text)

    def finish(self) -> None:
        """Erase the bar (the command prints its own result next)."""
        if self.width:
            self._write("\r" + " " * self.width + "\r")
            self.width = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a terminal that went away must not stop the work
            self.enabled = False

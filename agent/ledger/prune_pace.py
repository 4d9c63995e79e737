"""The ledger prune's pace: it works at most `retention.duty` of the wall time and rests the rest
(`agent.core.duty`), so a catch-up over months of partitions leaves the intake most of the
database's and the host's CPU. It rests between pieces of work of at least `SLICE_S`: rows
streamed into an archive, a verification, a delete transaction."""

from __future__ import annotations

import asyncio
import time

from agent.core.duty import rest_after

SLICE_S = 0.1  # work at least this long before a rest (rests of a few ms would cost more than they give)


class Pace:
    def __init__(self, duty: float) -> None:
        self.duty = duty
        self.rested_s = 0.0
        self._since = time.perf_counter()

    async def step(self) -> None:
        """Called after a piece of work: rests when the work since the last rest reached a slice."""
        if self.duty >= 1.0:
            return
        took = time.perf_counter() - self._since
        if took < SLICE_S:
            return
        rest = rest_after(took, self.duty)
        self.rested_s += rest
        await asyncio.sleep(rest)
        self._since = time.perf_counter()

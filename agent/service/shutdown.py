"""The graceful stop: how long each step after SIGTERM may take, and the bounded waits.

`StopBudget` is the one place the stop bounds are defined; their sum is the hard stop, which
must fit inside the unit's `TimeoutStopSec` with `SYSTEMD_MARGIN_S` to spare (tested against
`systemd/edge-agent.service`). Holds no service state and cancels nothing before its bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SYSTEMD_MARGIN_S = 5.0
"""Kept free between the hard stop and systemd's SIGKILL: interpreter exit, a loaded machine."""


@dataclass(frozen=True, slots=True)
class StopBudget:
    """Seconds each stop step may take, in the order they run after SIGTERM."""

    pollers_s: float = 5.0  # a poll in flight finishes and every source closes
    recorder_s: float = 4.0  # the recorder commits what was read
    drain_s: float = 8.0  # forwarders keep sending the backlog
    settle_s: float = 2.0  # forwarders settle what the drain left in flight
    close_s: float = 2.0  # the last status, the housekeeping tasks, sinks and store closed

    @property
    def forwarders_s(self) -> float:
        """How long the forwarders get from the moment they are told to stop."""
        return self.drain_s + self.settle_s

    @property
    def hard_stop_s(self) -> float:
        """The whole stop sequence after SIGTERM is bounded by this."""
        return self.pollers_s + self.recorder_s + self.forwarders_s + self.close_s


STOP_BUDGET = StopBudget()
"""The budget `edge-agent run` stops with."""

CANCEL_GRACE_S = 1.0
"""How long a cancelled task gets to unwind; spent from `SYSTEMD_MARGIN_S`, never waited beyond."""


class StopSequence:
    """The steps of one stop, each bounded by its own budget and all together by `hard_stop_s`.

    Start it when the stop is asked for. A task that overruns its step is cancelled (the last
    resort) and the error log says what was cut short and by which bound."""

    def __init__(self, budget: StopBudget) -> None:
        self.budget = budget
        self._loop = asyncio.get_running_loop()
        self._end = self._loop.time() + budget.hard_stop_s
        self.cut_short: list[str] = []

    def remaining_s(self) -> float:
        return max(0.0, self._end - self._loop.time())

    async def wait_tasks(self, tasks: Collection[asyncio.Task[Any]], seconds: float, what: str) -> bool:
        """Let `tasks` finish by themselves within `seconds` (and the hard stop); cancel the rest.

        True when every task finished by itself."""
        if not tasks:
            return True
        hard = self.remaining_s() < seconds
        timeout = min(seconds, self.remaining_s())
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if not pending:
            return True
        names = ", ".join(sorted(t.get_name() for t in pending))
        if hard:
            log.error(
                "hard stop (%gs after SIGTERM) reached during %s; cancelling %s",
                self.budget.hard_stop_s,
                what,
                names,
            )
        else:
            log.error("%s did not stop within %gs; cancelling %s", what, seconds, names)
        self.cut_short.append(what)
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
        return False

    async def step(self, work: Awaitable[Any], seconds: float, what: str) -> bool:
        """Run one awaitable as a bounded step (see `wait_tasks`)."""
        task = asyncio.ensure_future(work)
        task.set_name(what)
        return await self.wait_tasks([task], seconds, what)

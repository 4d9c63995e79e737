"""Supervision of the service's long-running tasks: one failing task never stops the service.

Each device connection, each forwarder and the recorder run under :func:`supervise`. An
unexpected exception (a bug, a library surprise) is logged with its traceback (the first time
that error is seen in that task; repeats in one line), counted in the task's
:class:`~agent.core.live.TaskLive` (shown by `status` and as a metric), and the task is started
again after a capped, jittered backoff. The service stays up and keeps recording what the other
tasks see.

Only a fatal store error ends the service: the store is damaged (`StoreCorrupt`) or a task
let a store error escape that it could not handle. Then :class:`Fatal` remembers the first
one, the service's stop sequence runs (pollers stop, the recorder tries a last commit) and
`edge-agent run` exits with :data:`FATAL_STORE_EXIT` (74, EX_IOERR) and one clear line; the
unit restarts it, and a damaged store is moved aside at the next open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agent.core.errors import StoreError, StoreFull
from agent.core.live import TaskLive
from agent.core.retry import backoff_s

log = logging.getLogger(__name__)

FATAL_STORE_EXIT = 74  # EX_IOERR: the store cannot be used any more


@dataclass
class Fatal:
    """The first fatal error of a run (None while there is none); setting it stops the service."""

    stop: asyncio.Event
    error: BaseException | None = None
    task: str | None = None

    def set(self, task: str, exc: BaseException) -> None:
        if self.error is None:
            self.error, self.task = exc, task
            log.critical("fatal store error in %s, the service stops: %s", task, exc)
        self.stop.set()


def is_fatal(exc: BaseException) -> bool:
    """A store error that escaped a task (the tasks handle the ones they can, such as a full disk)."""
    return isinstance(exc, StoreError) and not isinstance(exc, StoreFull)


@dataclass
class Supervisor:
    """Runs tasks under supervision; `tasks` holds their live state (for `status` and metrics)."""

    fatal: Fatal
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    jitter: Callable[[], float] = random.random
    tasks: list[TaskLive] = field(default_factory=list)  # the service's live state shares this list

    def health(self, name: str) -> TaskLive:
        for t in self.tasks:
            if t.name == name:
                return t
        t = TaskLive(name)
        self.tasks.append(t)
        return t

    async def run(
        self,
        name: str,
        start: Callable[[], Awaitable[None]],
        stop: asyncio.Event,
        *,
        again_at_stop: bool = False,
    ) -> None:
        """Run `start()` until it returns; restart it after an unexpected exception unless `stop`
        is set. `again_at_stop`: a task that failed is started once more after `stop` (the
        recorder: it commits what is still queued)."""
        health = self.health(name)
        logged: set[str] = set()
        failures = 0
        last_chance = False
        while True:
            try:
                await start()
                health.state = "stopped"
                return
            except Exception as exc:
                if is_fatal(exc):
                    health.failed(f"{type(exc).__name__}: {exc}")
                    self.fatal.set(name, exc)
                    return
                failures += 1
                text = f"{type(exc).__name__}: {exc}"
                health.failed(text)
                if text not in logged:
                    logged.add(text)
                    log.exception("task %s failed unexpectedly; restarting it: %s", name, text)
                else:
                    log.error("task %s failed again (%d restarts): %s", name, health.restarts, text)
            if self.fatal.error is not None or last_chance:
                return
            if not stop.is_set():
                delay = backoff_s(
                    failures, initial_s=self.backoff_initial, max_s=self.backoff_max, jitter=self.jitter()
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                if not again_at_stop:
                    health.state = "stopped"
                    return
                last_chance = True
            health.restarted()

"""One upstream's batches in flight: a claimed batch (`Flight`), its publishing chained behind the
batch before it, its outcomes cut short by the drain after a stop (`Drain`). The forwarder
(`agent.service.forwarder`) claims, encodes, launches and settles them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from agent.core.send_outcome import SendOutcome, Verdict, all_delivered, retry
from agent.core.wording import counted
from agent.sinks.base import Sink
from agent.sinks.encode import Event

log = logging.getLogger("agent.service.forwarder")  # its lines are the forwarder's


@dataclass(eq=False)
class Flight:
    """One claimed batch: its rows' outbox ids, their outcomes so far (encode errors), what is
    being published. The claimed entries themselves are let go as they are encoded."""

    ids: list[int]
    outcomes: list[SendOutcome | None]
    slots: list[int]
    events: list[Event]
    task: asyncio.Task[list[SendOutcome]] | None


async def publish_beside(
    sink: Sink, prev: asyncio.Task[list[SendOutcome]], events: list[Event]
) -> list[SendOutcome]:
    """Publish `events` while `prev` is still in flight; not at all when `prev` already failed
    (its events go out again from the head of the queue, and these after them)."""
    if prev.done() and (prev.cancelled() or prev.exception() is not None or failed(prev.result())):
        return [retry("not sent: the batch before it was not acknowledged")] * len(events)
    return await sink.publish(events)


async def publish_after(
    sink: Sink, prev: asyncio.Task[list[SendOutcome]], events: list[Event]
) -> list[SendOutcome]:
    """Publish `events` once `prev` is acknowledged in full; not at all when it is not."""
    await asyncio.wait({prev})
    if prev.cancelled() or prev.exception() is not None:
        return [retry("not sent: the batch before it was not sent")] * len(events)
    if failed(prev.result()):
        return [retry("not sent: the batch before it was not acknowledged")] * len(events)
    return await sink.publish(events)


async def bounded(
    task: asyncio.Task[list[SendOutcome]], count: int, drain: Drain, upstream: str
) -> list[SendOutcome]:
    """The outcomes of a publish task, cut short when stopping takes longer than the drain allows."""
    if not task.done():
        loop = asyncio.get_running_loop()
        stopping = asyncio.create_task(drain.stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await asyncio.wait({task}, timeout=max(0.0, drain.end() - loop.time()))
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, stopping, return_exceptions=True)
    if task.cancelled():
        log.warning(
            "drain of %.0fs over: %s not acknowledged stay pending upstream=%s",
            drain.drain_s,
            counted(count, "event"),
            upstream,
        )
        return [retry("stopped before the upstream acknowledged")] * count
    return task.result()


def failed(outcomes: list[SendOutcome]) -> bool:
    return not all_delivered(outcomes) and any(o.verdict is Verdict.RETRY for o in outcomes)


async def wait_or_stop(stop: asyncio.Event, delay: float) -> None:
    """Sleep `delay` seconds, or less when stop is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)


class Drain:
    """The drain after `stop`: `drain_s` seconds from the moment the stop is first seen."""

    def __init__(self, stop: asyncio.Event, drain_s: float) -> None:
        self.stop = stop
        self.drain_s = drain_s
        self._loop = asyncio.get_running_loop()
        self._deadline: float | None = None

    def end(self) -> float:
        """When the drain ends (fixed the first time it is asked for, once stopping)."""
        if self._deadline is None:
            self._deadline = self._loop.time() + self.drain_s
        return self._deadline

    def over(self) -> bool:
        return self.stop.is_set() and self._loop.time() >= self.end()

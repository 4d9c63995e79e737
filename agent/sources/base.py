"""What a source is, and the one loop that drives every source connection.

Holds the Source and ObservationSink protocols, the once-per-change StateLog and
:func:`run_source`. It must not read a controller itself or touch the store.

A *source* is one connection to one controller (a device with a Modbus and an OPC UA
connection has two, each with its own task and tracker; the store makes one canonical event of
their arrivals). :class:`Source` is called ``connect``, then ``poll``/``wait`` alternately,
then ``close``, never concurrently, from the one task that owns it: ``connect`` and ``wait``
raise :class:`~agent.core.errors.SourceUnavailable` for a link that is lost (``connect`` never
retries by itself); ``poll`` reads once, consistently, and returns what is new, and a failure
of one field is evidence and a log line, not a link failure; ``close`` never raises and returns
promptly. The contract method by method: docs/architecture.md, "A source".

:class:`ObservationSink` is what sources hand observations to (the recorder): ``submit``
returning means the observation is queued, not committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

from agent.core.errors import SourceUnavailable
from agent.core.live import ConnectionLive
from agent.core.retry import backoff_s
from agent.core.snapshot import Observations

log = logging.getLogger(__name__)


class ObservationSink(Protocol):
    async def submit(self, obs: Observations) -> None:
        """Queue ``obs`` for the store. May wait when the store is behind (backpressure)."""


class Source(Protocol):
    device: str
    receiver: str

    async def connect(self) -> None: ...

    async def poll(self) -> Observations: ...

    async def wait(self, stop: asyncio.Event) -> None: ...

    async def close(self) -> None: ...


class StateLog:
    """Logs a state change once; repeats of the same state go to DEBUG (not once per poll)."""

    def __init__(self, logger: logging.Logger, label: str) -> None:
        self.logger, self.label = logger, label
        self.states: dict[str, str | None] = {}
        self.changes = 0  # how many changes were logged: what reads `states` knows when to read again

    def set(self, what: str, state: str | None, level: int = logging.WARNING) -> bool:
        """``state`` None means "fine". Returns True when this was a change (and was logged)."""
        before = self.states.get(what)
        self.states[what] = state
        if before == state:
            if state is not None:
                self.logger.debug("%s %s still: %s", self.label, what, state)
            return False
        self.changes += 1
        if state is None:
            if before is not None:
                self.logger.info("%s %s recovered", self.label, what)
        else:
            self.logger.log(level, "%s %s: %s", self.label, what, state)
        return True


def _boot_of(obs: Observations) -> str | None:
    """The controller's current boot id as this poll showed it (None: unchanged or unknown)."""
    if obs.boots:
        return obs.boots[-1].boot_id
    for d in reversed(obs.deliveries):
        if d.live and d.boot_id:
            return d.boot_id
    return None


class _Link:
    """The state of one source's link as the loop sees it: logged once per change, counted for
    the backoff, and reported to the live status when there is one.

    An answer while the link is up and the source's warnings have not changed writes only the
    live state's poll time and count: the rest is written when something changed."""

    def __init__(self, source: Source, live: ConnectionLive | None) -> None:
        self.label = f'Device "{source.device}" ({source.receiver})'
        self.source = source
        self.state = StateLog(log, self.label)
        self.live = live
        self.failures = 0
        self.up = False  # answered since the last failure (the "link" state is fine and logged so)
        errors = getattr(source, "errors", None)
        self.errors = errors if isinstance(errors, StateLog) else None
        self.errors_seen = -1  # the `errors.changes` the live problems were last taken at

    def answered(self, obs: Observations) -> None:
        # Up only once a read answered: a half-open peer accepts connects and then never
        # answers, and would otherwise flap between "recovered" and "unavailable".
        if not self.up:
            self.state.set("link", None)
            self.failures, self.up = 0, True
        live = self.live
        if live is not None:
            live.polled(time.time(), _boot_of(obs) if obs.boots or obs.deliveries else None)
            errors = self.errors
            if errors is None:
                if self.errors_seen:
                    live.problems, self.errors_seen = {}, 0
            elif errors.changes != self.errors_seen:
                live.problems, self.errors_seen = self.problems(), errors.changes
        for note in obs.notes:
            log.info("%s: %s", self.label, note)

    def problems(self) -> dict[str, str]:
        """The source's current warnings (its ``errors`` StateLog, when it keeps one)."""
        errors = self.errors
        if errors is None:
            return {}
        return {what: state for what, state in errors.states.items() if state is not None}

    def failed(self, exc: SourceUnavailable) -> None:
        self.failures += 1
        self.up = False
        self.state.set("link", f"unavailable: {exc}")
        if self.live is not None:
            self.live.failed(str(exc))


async def _poll_until_stopped(
    source: Source, sink: ObservationSink, stop: asyncio.Event, link: _Link
) -> None:
    """Poll, hand on what is new, wait; until ``stop`` (or SourceUnavailable from the source)."""
    while not stop.is_set():
        obs = await source.poll()
        link.answered(obs)
        if obs:
            await sink.submit(obs)
        await source.wait(stop)


async def run_source(
    source: Source,
    sink: ObservationSink,
    stop: asyncio.Event,
    *,
    backoff_initial: float = 0.25,
    backoff_max: float = 10.0,
    jitter: Callable[[], float] = random.random,
    live: ConnectionLive | None = None,
) -> None:
    """Connect, poll and hand observations on until ``stop``; reconnect with capped, jittered backoff.

    Returns only when ``stop`` is set. The connection state is logged once per change.
    """
    link = _Link(source, live)
    while not stop.is_set():
        try:
            await source.connect()
            await _poll_until_stopped(source, sink, stop, link)
        except SourceUnavailable as exc:
            link.failed(exc)
        finally:
            await source.close()
        if stop.is_set():
            break
        delay = backoff_s(
            max(link.failures, 1), initial_s=backoff_initial, max_s=backoff_max, jitter=jitter()
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
    if live is not None:
        live.state = "stopped"

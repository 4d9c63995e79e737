"""When a polled connection reads: its slot in the poll interval, and the timer to its next tick.

Connections with one interval would all wake on the same millisecond if they ticked at its
multiples: their requests queue behind each other at the controllers' and the store's end, and one
that lands after the next tick loses it. Spread one by one over the interval (a phase per
connection) they cost one event-loop wake-up each per tick (a timer, an ``epoll_wait``, a
callback): measured here at 200 connections x 10 Hz, a bare pymodbus loop spent 141 us of CPU per
poll spread against 74 aligned (issue 35). So the phases are quantized into slots of about
``SLOT_S`` (10 ms: 10 slots at 10 Hz, 100 at 1 Hz): the connections of a slot fall due at the same
instant and the event loop starts them in one pass (102 us per poll for the same bare loop at 10
slots), while the slots still spread the load over the interval. Every interval's slots lie on
the same 10 ms grid, so the process wakes at most about 100 times a second for its ticks, and
slow connections do not pile onto few phases (1,000 PLCs at 1 Hz on 10 slots would start 100
requests at once). Each poll stays its own task's await with its own timeout: a slow or dead
connection never holds back the others of its slot.

:class:`SlotBook` fills an interval's slots up to ``SLOT_FILL`` connections each before it opens
another, and opens them in an order that keeps the open ones spread over the interval (halves,
then quarters, then eighths: a van der Corput sequence, from a first slot named by the interval).
So a few connections tick together as an aligned loop does (20 OPC UA connections at 10 Hz in
one slot: asyncua costs several event-loop passes per request, and they are shared by every
connection of a pass), and many are spread (200 at 10 Hz: 10 slots of 20). At most
``SLOT_FILL`` requests of an interval start at once while the interval has an empty slot; past
that (over ``SLOT_FILL`` x slots connections) the least-filled slot takes the next. The same
configuration gets the same slots on every start. A connection gives its slot back when its
device stops (removed, or restarted by a reload), and a slot with room is taken again first.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import Any

SLOT_S = 0.01  # a slot's width (issue 35 measured 10 and 20 slots at 10 Hz alike, both well under spread)
SLOT_FILL = 20  # connections a slot takes before the next opens (200 at 10 Hz: 10 slots of 20)
MAX_SLOTS = 1000  # an interval over 10 s gets slots wider than SLOT_S


def slots_of(period: float, slot_s: float = SLOT_S) -> int:
    """How many slots an interval of `period` seconds has: about one per `slot_s`, at least one."""
    return max(1, min(MAX_SLOTS, round(period / slot_s)))


def spread_order(n: int, first: int = 0) -> list[int]:
    """The n slots in the order they open: any leading run of it lies spread over the interval
    (0, 1/2, 1/4, 3/4, 1/8, ... of it: the van der Corput sequence), turned to start at `first`."""
    order: list[int] = []
    seen = [False] * n
    i = 0
    while len(order) < n:  # the first 2**k points of the sequence hit every slot once 2**k >= n
        frac, bit, j = 0.0, 0.5, i
        while j:
            frac += bit * (j & 1)
            j >>= 1
            bit /= 2
        k = (first + int(frac * n)) % n
        if not seen[k]:
            seen[k] = True
            order.append(k)
        i += 1
    return order


@dataclass(frozen=True, slots=True)
class Slot:
    period: float
    index: int
    phase: float  # seconds after each multiple of the period


class SlotBook:
    """The slots taken per poll interval. One per process (:data:`BOOK`); tests make their own."""

    def __init__(self, slot_s: float = SLOT_S, fill: int = SLOT_FILL) -> None:
        if slot_s <= 0:
            raise ValueError("a slot must be longer than 0")
        if fill < 1:
            raise ValueError("a slot must take at least one connection")
        self.slot_s, self.fill = slot_s, fill
        self._counts: dict[float, list[int]] = {}
        self._orders: dict[float, list[int]] = {}

    def take(self, period: float) -> Slot:
        """The first opened slot of `period` with room (taking fewer than ``fill``); else the next
        slot to open; else (every slot open and full) the least-filled, the earliest opened among
        equals."""
        counts = self._counts.get(period)
        if counts is None:
            n = slots_of(period, self.slot_s)
            counts = self._counts[period] = [0] * n
            # The first slot named by the interval, so that intervals do not all open on one instant.
            self._orders[period] = spread_order(n, zlib.crc32(repr(period).encode()) % n)
        order = self._orders[period]
        empty: int | None = None
        least = order[0]
        for i in order:
            c = counts[i]
            if 0 < c < self.fill:
                index = i
                break
            if c == 0 and empty is None:
                empty = i
            if c < counts[least]:
                least = i
        else:
            index = empty if empty is not None else least
        counts[index] += 1
        return Slot(period, index, index * period / len(counts))

    def give_back(self, slot: Slot) -> None:
        counts = self._counts.get(slot.period)
        if counts is not None and counts[slot.index] > 0:
            counts[slot.index] -= 1

    def counts(self, period: float) -> list[int]:
        return list(self._counts.get(period, [0] * slots_of(period, self.slot_s)))


BOOK = SlotBook()


def due_in_s(period: float, phase: float, now: float) -> float:
    """Seconds from `now` to the next tick at `phase + k * period` (no drift, no burst after a
    slow read: a tick that has passed is skipped, never made up)."""
    return period - ((now - phase) % period)


def next_tick(period: float, phase: float, now: float) -> float:
    """The instant (``time.monotonic``, the event loop's clock) of the next tick at `phase + k *
    period` after `now`: every connection of a slot gets the same one, up to rounding."""
    return now + due_in_s(period, phase, now)


MIN_SLEEP_S = 0.001  # the event loop's timers wait in whole milliseconds (epoll)


def _wake(tick: asyncio.Future[None]) -> None:
    if not tick.done():  # a sleep that was cancelled, or already woken
        tick.set_result(None)


class _SlotTimers:
    """One event-loop timer per instant that ticks fall due on: the connections of a slot wake
    from one timer (one heap entry and one callback for the slot, not one per connection)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: dict[int, list[asyncio.Future[None]]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, when: float, tick: asyncio.Future[None]) -> None:
        if loop is not self._loop:  # another event loop (tests run several): its own timers
            self._loop, self._due = loop, {}
        key = round(when * 1e6)  # the same instant, up to float rounding, is the same microsecond
        ticks = self._due.get(key)
        if ticks is not None:
            ticks.append(tick)
            return
        self._due[key] = [tick]
        loop.call_at(when, self._fire, key)

    def _fire(self, key: int) -> None:
        for tick in self._due.pop(key, ()):
            _wake(tick)


_TIMERS = _SlotTimers()


class Pacer:
    """One connection's ticks: the future to await for the next one, done early when one of the
    given events (that stay set once set: ``stop``, a lost link) is set.

    One waiter per event lives as long as the event, not one per tick: each tick is one future,
    and the ticks due on one instant (a slot's connections) share one timer. Call :meth:`drop`
    when the connection closes."""

    def __init__(self) -> None:
        self._tick: asyncio.Future[None] | None = None  # the last tick handed out
        self._events: tuple[asyncio.Event, ...] = ()
        self._waiters: list[asyncio.Future[Any]] = []

    def tick(self, when: float, *events: asyncio.Event) -> asyncio.Future[None] | None:
        """A future done at `when` (the loop's clock: :func:`next_tick`) or when one of `events`
        is set; None when one is set. Under a millisecond away it yields to the loop once (a
        timer would wait a whole one)."""
        if events != self._events:
            self.drop()
            self._events = events
            for e in events:
                waiter = asyncio.ensure_future(e.wait())
                waiter.add_done_callback(self._set)
                self._waiters.append(waiter)
        for e in events:
            if e.is_set():
                return None
        loop = asyncio.get_running_loop()
        tick = self._tick = loop.create_future()
        # Left to fire when the tick was ended early: `_wake` finds it done.
        if when - loop.time() < MIN_SLEEP_S:
            loop.call_soon(_wake, tick)
        else:
            _TIMERS.add(loop, when, tick)
        return tick

    def _set(self, waiter: asyncio.Future[Any]) -> None:
        """An event was set: end the tick under way, if any (not for a waiter dropped)."""
        if self._tick is not None and not waiter.cancelled():
            _wake(self._tick)

    def drop(self) -> None:
        """Cancel the waiters (the connection closed; its events may never be set)."""
        waiters, self._waiters, self._events = self._waiters, [], ()
        for waiter in waiters:
            if not waiter.done():
                waiter.cancel()

"""The controller model: boot generations, event channels, counters and a ring buffer.

This module is pure: no sockets, no sleeping, no wall clock unless one is injected. Every
source of variation (boot ids in ``random32`` mode, the random load driver) comes from a
seeded ``random.Random`` and every time from an injected clock, so a test that drives the
model gets the same register image on every run.

It models what makes event identity hard in the field, the way many PLCs behave:

* a **boot id** that changes on every restart (a retentive boot counter, or a random
  32-bit value), or none at all (``boot_id_mode="none"``);
* per channel a **transition counter** of 16 or 32 bits. 0 means "no transition yet in
  this boot"; the first transition after a (re)start is 1. The counter wraps like a PLC's
  unsigned integer: ``65535 -> 0 -> 1``. The transition that lands on 0 is real (it is in
  the ring buffer with transitionId 0) although a poller that only sees the live counter
  cannot tell it from "no transition yet"; ``skip_zero=True`` makes the counter wrap
  ``65535 -> 1`` instead, as some PLC programs do exactly to avoid that ambiguity;
* a **ring buffer** of the last N transitions, each with its own transitionId, bootId,
  state and source time, plus a head counter (entries ever written, 32-bit, monotonic
  across restarts). A restart keeps the old boot's entries until they are overwritten.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

Clock = Callable[[], int]
"""Milliseconds since the Unix epoch (UTC)."""

BootIdMode = Literal["counter", "random32", "none"]

U32 = 2**32


def system_clock() -> int:
    """The machine's wall clock in ms since the Unix epoch, the default controller clock."""
    return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to, for deterministic tests and scripted scenarios."""

    def __init__(self, start_ms: int = 1_776_844_800_000) -> None:  # 2026-04-22T08:00:00Z
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass(frozen=True)
class ChannelSpec:
    """One event channel: its name, its named state values and its counter width."""

    name: str
    values: Mapping[int, str] = field(default_factory=lambda: {0: "Normal", 1: "Trip"})
    counter_bits: Literal[16, 32] = 32
    skip_zero: bool = False

    def __post_init__(self) -> None:
        if self.counter_bits not in (16, 32):
            raise ValueError(f"channel {self.name!r}: counter_bits must be 16 or 32, not {self.counter_bits}")
        if not self.values or any(not 0 <= v <= 0xFFFF for v in self.values):
            raise ValueError(f"channel {self.name!r}: state values must be uint16 and at least one")


@dataclass(frozen=True)
class ChannelState:
    """The live values of one channel: what a poller reads from the channel's registers or nodes."""

    transition_id: int = 0
    state: int = 0
    source_time_ms: int = 0


@dataclass(frozen=True)
class RingEntry:
    """One transition as the controller's offline buffer keeps it.

    ``seq`` is the head value right after this entry was written (1-based, 32-bit), so the
    entry with ``seq == s`` lives in slot ``(s - 1) % capacity``. ``boot_id`` is 0 when the
    controller has no boot id.
    """

    seq: int
    channel: int
    transition_id: int
    boot_id: int
    state: int
    source_time_ms: int


class Controller:
    """A simulated PLC. Mutated only by :meth:`transition`, :meth:`restart` and :meth:`set_counter`.

    ``version`` increases with every change so that servers can tell whether they are in sync.
    """

    def __init__(
        self,
        name: str,
        channels: list[ChannelSpec],
        *,
        boot_id_mode: BootIdMode = "counter",
        boot_id_start: int = 17,
        ring_capacity: int = 8,
        seed: int = 0,
        clock: Clock = system_clock,
    ) -> None:
        if not channels:
            raise ValueError(f"controller {name!r}: needs at least one channel")
        if len({c.name for c in channels}) != len(channels):
            raise ValueError(f"controller {name!r}: channel names must be unique")
        if ring_capacity < 1:
            raise ValueError(f"controller {name!r}: ring_capacity must be >= 1")
        self.name = name
        self.channels = list(channels)
        self.boot_id_mode: BootIdMode = boot_id_mode
        self.ring_capacity = ring_capacity
        self.clock = clock
        self.clock_offset_ms = 0
        self.rng = random.Random(seed)
        self.version = 0
        self.head = 0
        self.boot_time_ms = self.now_ms()
        self._slots: list[RingEntry | None] = [None] * ring_capacity
        self._live = [ChannelState(state=min(c.values)) for c in channels]
        self.boot_id: int | None = None
        if boot_id_mode == "counter":
            self.boot_id = boot_id_start % U32
        elif boot_id_mode == "random32":
            self.boot_id = self._draw_random_boot_id()

    @property
    def has_boot_id(self) -> bool:
        return self.boot_id is not None

    def now_ms(self) -> int:
        """The controller's own clock: the injected clock plus any jump a restart made."""
        return self.clock() + self.clock_offset_ms

    def channel_index(self, channel: str | int) -> int:
        if isinstance(channel, int):
            if not 0 <= channel < len(self.channels):
                raise IndexError(f"controller {self.name!r}: no channel index {channel}")
            return channel
        for i, spec in enumerate(self.channels):
            if spec.name == channel:
                return i
        raise KeyError(f"controller {self.name!r}: no channel {channel!r}")

    def channel(self, channel: str | int) -> ChannelState:
        return self._live[self.channel_index(channel)]

    def ring_slots(self) -> list[RingEntry | None]:
        """The ring as stored: slot i holds the entry whose seq is ``i + 1`` modulo capacity."""
        return list(self._slots)

    def ring_entries(self) -> list[RingEntry]:
        """The entries still in the ring, oldest first."""
        return sorted((e for e in self._slots if e is not None), key=lambda e: e.seq)

    def transition(self, channel: str | int, state: int | None = None) -> RingEntry:
        """One state transition: bump the counter, stamp the time, append to the ring.

        ``state=None`` moves to the next named state value (cyclically), so a two-state
        channel toggles. The same state again is allowed: a PLC counts re-trips too.
        """
        i = self.channel_index(channel)
        spec, live = self.channels[i], self._live[i]
        if state is None:
            ordered = sorted(spec.values)
            state = (
                ordered[(ordered.index(live.state) + 1) % len(ordered)]
                if live.state in ordered
                else ordered[0]
            )
        if not 0 <= state <= 0xFFFF:
            raise ValueError(f"{self.name}.{spec.name}: state {state} is not a uint16")
        counter = (live.transition_id + 1) % 2**spec.counter_bits
        if counter == 0 and spec.skip_zero:
            counter = 1
        now = self.now_ms()
        self._live[i] = ChannelState(transition_id=counter, state=state, source_time_ms=now)
        self.head = (self.head + 1) % U32
        entry = RingEntry(self.head, i, counter, self.boot_id or 0, state, now)
        self._slots[(self.head - 1) % self.ring_capacity] = entry
        self.version += 1
        return entry

    def restart(self, *, clock_jump_ms: int = 0, boot_id: int | None = None) -> int | None:
        """Power cycle: a new boot id, counters back to 0, states to their lowest value.

        The ring and its head are retentive (they survive, as a PLC's event log does); the
        clock may jump (``clock_jump_ms``, e.g. an RTC that was not battery backed).
        ``boot_id`` forces a value (tests); otherwise the mode decides.
        """
        self.clock_offset_ms += clock_jump_ms
        if self.boot_id is not None:
            if boot_id is not None:
                self.boot_id = boot_id % U32
            elif self.boot_id_mode == "counter":
                self.boot_id = (self.boot_id + 1) % U32
            else:
                self.boot_id = self._draw_random_boot_id()
        self.boot_time_ms = self.now_ms()
        self._live = [ChannelState(state=min(c.values)) for c in self.channels]
        self.version += 1
        return self.boot_id

    def set_counter(self, channel: str | int, value: int) -> None:
        """Force a channel's counter (no ring entry, time unchanged): sets up wrap and reset tests."""
        i = self.channel_index(channel)
        bits = self.channels[i].counter_bits
        if not 0 <= value < 2**bits:
            raise ValueError(f"{self.name}.{self.channels[i].name}: {value} does not fit {bits} bits")
        self._live[i] = replace(self._live[i], transition_id=value)
        self.version += 1

    def _draw_random_boot_id(self) -> int:
        # Never 0 (reads as "unset" on many HMIs) and never the current value: a restart
        # that kept its boot id would be invisible, which is not what this mode models.
        while True:
            value = self.rng.getrandbits(32)
            if value not in (0, self.boot_id):
                return value

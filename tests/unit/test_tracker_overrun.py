"""A ring "overrun" only when transitions are really missing (issue 28).

The ring is read only when a counter jumps, so on a busy controller its head often moved
further than its capacity since the last ring read while the live reads delivered every
transition in between. That is no overrun: nothing is said and nothing recorded. A model
controller (two channels, a ring of 8, read the way the Modbus source reads it: the ring only
when ``needs_ring`` says so) is driven through random poll histories, and every observation is
compared with the truth: what the live reads and the ring delivered, what neither did.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.snapshot import ChannelRead, Observations, RingItem, RingRead, Snapshot
from agent.core.tracker import DeviceTracker

DEV, BOOT, CAP = "PLC-1", "17", 8
CHANNELS = ("Trip", "Overload")


@dataclass
class Plc:
    """A controller with one counter per channel and a ring of the last CAP transitions."""

    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHANNELS, 0))
    ring: list[RingItem] = field(default_factory=list)
    made: set[tuple[str, int]] = field(default_factory=set)

    def transition(self, channel: str) -> None:
        self.counters[channel] += 1
        tid = self.counters[channel]
        self.made.add((channel, tid))
        self.ring = [*self.ring, RingItem(len(self.made), channel, tid, BOOT, tid % 2, None)][-CAP:]

    def read(self, tracker: DeviceTracker, at: str) -> Observations:
        channels = tuple(ChannelRead(c, t, state=t % 2) for c, t in self.counters.items())
        snap = Snapshot(DEV, "modbus:test", at, BOOT, channels)
        if tracker.needs_ring(snap):
            snap = replace(snap, ring=RingRead(len(self.made), CAP, tuple(self.ring)))
        return tracker.observe(snap)


def run(steps: list[list[str]]) -> tuple[set[tuple[str, int]], set[tuple[str, int]], list[Observations]]:
    """Poll after each step's transitions: (delivered, named lost, every observation)."""
    plc, tracker = Plc(), DeviceTracker(DEV, ring_mapped=True)
    observations = [plc.read(tracker, "2026-04-22T08:00:00.000Z")]
    for i, step in enumerate(steps):
        for channel in step:
            plc.transition(channel)
        observations.append(plc.read(tracker, f"2026-04-22T08:00:{i % 60:02d}.100Z"))
    delivered = {
        (d.source.split("/")[1], int(d.transition_id or 0)) for o in observations for d in o.deliveries
    }
    named = {
        (a.source.split("/")[1], tid)
        for o in observations
        for a in o.anomalies
        for tid in range(int(a.first), int(a.last) + 1)
    }
    return delivered, named, observations


def overrun_notes(observations: list[Observations]) -> list[str]:
    return [n for o in observations for n in o.notes if "overrun" in n]


def test_a_busy_controller_whose_live_reads_saw_everything_has_no_overrun() -> None:
    # One transition per poll (the counter steps by 1: no ring read), 24 polls, then two at
    # once: the ring is read, its head moved 26 entries since the last ring read, capacity 8.
    steps = [["Trip"]] * 24 + [["Trip", "Trip"]]
    delivered, named, observations = run(steps)
    assert delivered == {("Trip", t) for t in range(1, 27)}
    assert named == set()
    assert overrun_notes(observations) == []
    assert [a for o in observations for a in o.anomalies] == []


def test_a_burst_longer_than_the_ring_is_an_overrun_naming_exactly_the_lost_ones() -> None:
    steps = [["Trip"]] * 5 + [["Trip"] * (CAP + 3)]  # T6..T16 in one poll: the ring keeps T9..T16
    delivered, named, observations = run(steps)
    assert named == {("Trip", t) for t in (6, 7, 8)}
    assert delivered == {("Trip", t) for t in range(1, 17)} - named
    [anomaly] = [a for o in observations for a in o.anomalies]
    assert (anomaly.kind, anomaly.first, anomaly.last) == ("overrun", "6", "8")
    [note] = overrun_notes(observations)
    assert "PLC-1/Trip 6..8" in note


polls = st.lists(st.lists(st.sampled_from(CHANNELS), max_size=CAP + 4), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(polls)
def test_overrun_is_said_and_recorded_exactly_when_a_transition_was_neither_read_live_nor_in_the_ring(
    steps: list[list[str]],
) -> None:
    made = {(c, t) for c in CHANNELS for t in range(1, sum(s.count(c) for s in steps) + 1)}
    delivered, named, observations = run(steps)
    assert delivered | named == made  # every transition delivered or named missing
    assert delivered & named == set()  # nothing named missing that was delivered
    lost_here = [o for o in observations if any(a.kind == "overrun" for a in o.anomalies)]
    noted_here = [o for o in observations if any("overrun" in n for n in o.notes)]
    assert lost_here == noted_here
    assert bool(named) == bool(lost_here)  # with a ring read at every jump, a loss is an overrun

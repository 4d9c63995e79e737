"""`DeviceTracker.settled`: when a source may skip a read that repeats the last one exactly.

A Modbus source that reads registers equal to its last poll's (same connection, no reconnect)
returns nothing without decoding or observing them, but only when the tracker said `settled`
after that last poll. These tests pin what that promise means: observing the same snapshot
again, at any later read time, adds nothing (no delivery, boot, anomaly, position or note)
and changes nothing in the tracker.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.snapshot import ChannelRead, RingItem, RingRead, Snapshot
from agent.core.tracker import DeviceTracker, Resume

DEV = "PUMP-07"
TIMES = ("2026-04-22T08:00:00.000Z", "2026-04-22T08:00:00.100Z", "2026-04-22T09:59:59.950Z")


def state_of(t: DeviceTracker) -> Any:
    """Everything a tracker keeps between observations."""
    return copy.deepcopy(
        (
            t.last_boot,
            t.counter_boot,
            t.counters,
            t.last_head,
            t.last_start_time,
            t.ring_due,
            list(t._recent),
            t._recent_max,
            t.windows.last,
        )
    )


boots = st.sampled_from([None, "17", "18"])
counters = st.one_of(st.none(), st.integers(0, 6), st.sampled_from([2**32 - 2, 2**32 - 1, 2**16 - 1]))
states = st.sampled_from(["Normal", "Trip", 3])
source_times = st.sampled_from([None, "2026-04-22T07:59:59.000Z"])


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    boot = draw(boots)
    tid = draw(counters)
    trip = ChannelRead(
        "Trip",
        tid,
        state=draw(states),
        bits=draw(st.sampled_from([16, 32])),
        error=None if tid is not None else "exception 2",
    )
    window_error = draw(st.booleans())
    door = ChannelRead(
        "Door",
        None,
        state=None if window_error else draw(states),
        source_timestamp=draw(source_times),
        error="not read" if window_error else None,
        window_ms=60_000,
    )
    ring = None
    if draw(st.booleans()):
        head = draw(st.integers(0, 12))
        entries = tuple(
            RingItem(seq, "Trip", draw(st.integers(0, 6)), draw(boots), "Trip", None)
            for seq in range(max(1, head - 3), head + 1)
            if seq
        )
        ring = RingRead(head, 8, entries)
    torn = draw(st.booleans()) and draw(st.booleans())
    return Snapshot(
        DEV,
        "modbus:test",
        draw(st.sampled_from(TIMES)),
        boot,
        (trip, door),
        boot_reads=(boot, "99") if torn else (),
        boot_where={"register": 0},
        start_time=draw(st.sampled_from([None, "2026-04-22T06:00:00.000Z", "2026-04-22T07:00:00.000Z"])),
        ring=ring,
        ring_error=None if ring is not None or not draw(st.booleans()) else "exception 2",
    )


resumes = st.one_of(
    st.none(),
    st.builds(
        Resume,
        boot=boots,
        counters=st.dictionaries(st.just("Trip"), st.integers(0, 6), max_size=1),
        ring_head=st.one_of(st.none(), st.integers(0, 12)),
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(snapshots(), min_size=1, max_size=8), resumes, st.booleans(), st.sampled_from(TIMES))
def test_a_settled_tracker_finds_nothing_in_the_same_read_again(
    reads: list[Snapshot], resume: Resume | None, ring_mapped: bool, later: str
) -> None:
    tracker = DeviceTracker(DEV, ring_mapped=ring_mapped, resume=resume)
    for snap in reads:
        if not ring_mapped:
            snap = replace(snap, ring=None)
        obs = tracker.observe(snap)
        if obs.torn or not tracker.settled(snap):
            continue
        before = state_of(tracker)
        again = replace(snap, read_at=later, ring=None)  # a repeat that was not given a ring read
        assert not tracker.needs_ring(again)
        repeat = tracker.observe(again)
        assert not repeat and not repeat.notes and not repeat.torn
        assert state_of(tracker) == before


def test_settled_after_a_plain_read_not_while_a_ring_read_is_due() -> None:
    plain = Snapshot(DEV, "modbus:test", TIMES[0], "17", (ChannelRead("Trip", 3, state="Trip"),))
    tracker = DeviceTracker(DEV)
    tracker.observe(plain)
    assert tracker.settled(plain)

    ringed = DeviceTracker(DEV, ring_mapped=True)
    ringed.observe(plain)  # the ring was due (first read) and not read: the next read must be full
    assert not ringed.settled(plain)
    with_ring = replace(plain, ring=RingRead(3, 8, ()))
    ringed.observe(with_ring)
    assert ringed.settled(with_ring)
    ringed.reconnected()  # a reconnect may hide ring entries: read in full again
    assert not ringed.settled(with_ring)


def test_not_settled_while_the_server_start_time_is_new() -> None:
    tracker = DeviceTracker(DEV)
    first = Snapshot(DEV, "opcua:test", TIMES[0], "17", (), start_time="2026-04-22T06:00:00.000Z")
    tracker.observe(first)
    assert tracker.settled(first)
    assert not tracker.settled(replace(first, start_time="2026-04-22T07:00:00.000Z"))

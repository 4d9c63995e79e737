"""Table tests of the pure transition logic: snapshots in, observations out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agent.core.gaps import subtract
from agent.core.snapshot import (
    ChannelRead,
    Observations,
    RingItem,
    RingRead,
    Snapshot,
    is_wrap,
    time_text,
)
from agent.core.tracker import DeviceTracker

DEV = "PUMP-07"
Read = tuple[str | None, int | None]  # (boot id, Trip counter) of one snapshot


def snap(
    boot: str | None,
    tid: int | None,
    *,
    ring: RingRead | None = None,
    boots: Sequence[Any] = (),
    bits: int = 32,
    at: str = "2026-04-22T08:00:00.000Z",
    start: str | None = None,
) -> Snapshot:
    ch = ChannelRead(
        "Trip",
        tid,
        state="Trip" if tid and tid % 2 else "Normal",
        bits=bits,
        error=None if tid is not None else "exception 2",
    )
    return Snapshot(
        DEV,
        "modbus:test",
        at,
        boot,
        (ch,),
        boot_reads=tuple(boots),
        boot_where={"register": 0},
        start_time=start,
        ring=ring,
    )


def run(reads: Sequence[Snapshot], tracker: DeviceTracker | None = None) -> list[Observations]:
    t = tracker or DeviceTracker(DEV)
    return [t.observe(s) for s in reads]


def keys(obs: Sequence[Observations]) -> list[tuple[str | None, str | None]]:
    return [(d.transition_id, d.boot_id) for o in obs for d in o.deliveries]


def anomalies(obs: Sequence[Observations]) -> list[tuple[str, str, str]]:
    return [(a.kind, a.first, a.last) for o in obs for a in o.anomalies]


@pytest.mark.parametrize(
    ("reads", "delivered", "found"),
    [
        pytest.param(
            [("17", 1), ("17", 1), ("17", 2)],
            [("1", "17"), ("2", "17")],
            [],
            id="a change is delivered once, a repeat never",
        ),
        pytest.param([("17", 0), ("17", 0)], [], [], id="a counter of 0 is never delivered"),
        pytest.param(
            [("17", 5)], [("5", "17")], [], id="the first read after a start delivers the current value"
        ),
        pytest.param(
            [("17", 91), ("17", 94)],
            [("91", "17"), ("94", "17")],
            [("gap", "92", "93")],
            id="a counter jump records the missed range as a gap and invents nothing",
        ),
        pytest.param(
            [("17", 2), ("18", 0), ("18", 1)],
            [("2", "17"), ("1", "18")],
            [],
            id="a boot change restarts the counters without an anomaly",
        ),
        pytest.param(
            [("17", 2), ("18", 3)],
            [("2", "17"), ("3", "18")],
            [("gap", "1", "2")],
            id="a boot seen starting knows its counter began at 0",
        ),
        pytest.param(
            [("17", 40), ("17", 3)],
            [("40", "17"), ("3", "17")],
            [("reset", "40", "3")],
            id="a step back that is not a wrap is a reset",
        ),
        pytest.param(
            [("17", 4_294_967_295), ("17", 1)],
            [("4294967295", "17"), ("1", "17")],
            [("wrap", "4294967295", "1")],
            id="top quarter to bottom quarter is a wrap",
        ),
        pytest.param(
            [(None, 1), (None, 2)],
            [("1", None), ("2", None)],
            [],
            id="no boot id gives deliveries without one and no anomalies",
        ),
        pytest.param(
            [("17", 1), ("17", None), ("17", 1)],
            [("1", "17")],
            [],
            id="a failed channel read is not a change",
        ),
    ],
)
def test_change_detection(
    reads: list[Read], delivered: list[tuple[str, str | None]], found: list[Any]
) -> None:
    obs = run([snap(b, t) for b, t in reads])
    assert keys(obs) == delivered
    assert anomalies(obs) == found


def test_a_sixteen_bit_counter_wraps_from_the_top_quarter_and_names_no_made_up_gap() -> None:
    obs = run([snap("17", 65535, bits=16), snap("17", 1, bits=16)])
    assert anomalies(obs) == [("wrap", "65535", "1")]
    assert keys(obs) == [("65535", "17"), ("1", "17")]


@pytest.mark.parametrize(
    ("old", "new", "bits", "wrap"),
    [
        pytest.param(65535, 0, 16, True, id="65535 to 0 wraps"),
        pytest.param(49152, 16383, 16, True, id="the quarter borders wrap"),
        pytest.param(49151, 1, 16, False, id="below the top quarter is a reset"),
        pytest.param(65535, 16384, 16, False, id="above the bottom quarter is a reset"),
    ],
)
def test_wrap_rule(old: int, new: int, bits: int, wrap: bool) -> None:
    assert is_wrap(old, new, bits) is wrap


def test_a_new_boot_id_is_seen_with_its_evidence_and_the_first_one_without_a_previous() -> None:
    obs = run(
        [snap("17", 1, start="2026-04-22T07:00:00.000Z"), snap("18", 0, start="2026-04-22T08:00:00.000Z")]
    )
    first, second = obs[0].boots[0], obs[1].boots[0]
    assert (first.boot_id, first.live, "previous_value" in first.evidence) == ("17", True, False)
    assert second.evidence["previous_value"] == "17"
    assert second.evidence["register"] == 0
    assert second.evidence["previous_server_start_time"] == "2026-04-22T07:00:00.000Z"


def test_a_snapshot_torn_across_a_boot_change_is_thrown_away() -> None:
    tracker = DeviceTracker(DEV)
    torn = tracker.observe(snap("18", 1, boots=("17", "18")))
    assert torn.torn and not torn.deliveries and not torn.boots
    again = tracker.observe(snap("18", 1, boots=("18", "18")))
    assert keys([again]) == [("1", "18")]


def entry(
    seq: int, tid: int, boot: str | None = "17", channel: str | None = "Trip", at: str | None = None
) -> RingItem:
    """A ring slot holding what a live read of the same transition shows (``snap``'s content)."""
    return RingItem(seq, channel, tid, boot, "Trip" if tid % 2 else "Normal", at)


@pytest.mark.parametrize(
    ("last_head", "ring", "live", "delivered", "found"),
    [
        pytest.param(
            1,
            RingRead(4, 8, (entry(1, 1), entry(2, 2), entry(3, 3), entry(4, 4))),
            ("17", 4),
            [("2", "17"), ("3", "17"), ("4", "17")],
            [],
            id="ring entries fill what polling missed and no gap is recorded",
        ),
        pytest.param(
            1,
            RingRead(5, 8, (entry(2, 2), entry(3, 3), entry(4, 4), entry(5, 1, "18"))),
            ("18", 1),
            [("2", "17"), ("3", "17"), ("4", "17"), ("1", "18")],
            [],
            id="entries of the old boot keep the old boot id after a restart",
        ),
        pytest.param(
            1,
            RingRead(12, 8, tuple(entry(s, s) for s in range(5, 13))),
            ("17", 12),
            [(str(t), "17") for t in range(5, 13)],
            [("overrun", "2", "4")],
            id="a head that moved more than the capacity names the lost transitions",
        ),
        pytest.param(
            1,
            RingRead(3, 8, (entry(2, 0), entry(3, 1, channel=None))),
            ("17", 1),
            [],
            [],
            id="ring entries with transition id 0 or an unknown channel are not delivered",
        ),
    ],
)
def test_ring_entries(
    last_head: int, ring: RingRead, live: Read, delivered: list[Any], found: list[Any]
) -> None:
    tracker = DeviceTracker(DEV, ring_mapped=True)
    tracker.observe(snap("17", 1, ring=RingRead(last_head, 8, (entry(1, 1),))))
    obs = tracker.observe(snap(*live, ring=ring))
    assert keys([obs]) == delivered
    assert anomalies([obs]) == found
    assert all(not d.live for d in obs.deliveries if d.evidence.get("ring"))


def test_a_transition_read_live_is_not_delivered_again_from_the_ring() -> None:
    tracker = DeviceTracker(DEV, ring_mapped=True)
    tracker.observe(snap("17", 0, ring=RingRead(0, 8, ())))
    obs = tracker.observe(snap("17", 1, ring=RingRead(1, 8, (entry(1, 1),))))
    assert [(d.transition_id, d.live) for d in obs.deliveries] == [("1", True)]
    assert not tracker.needs_ring(snap("17", 2))
    assert tracker.needs_ring(snap("17", 4))


def test_a_poller_payload_is_the_state_name_and_the_same_over_both_paths() -> None:
    a = run([snap("17", 1)])[0].deliveries[0]
    b = DeviceTracker(DEV).observe_entries([entry(1, 1)], read_at="x", receiver="opcua:x").deliveries[0]
    assert a.payload == {"state": "Trip"}
    assert (a.key, a.payload) == (b.key, b.payload)


@pytest.mark.parametrize(
    ("value", "unit", "clock", "text"),
    [
        pytest.param(
            1_776_844_812_120, "ms", "UTC", "2026-04-22T08:00:12.120Z", id="ms since the epoch in UTC"
        ),
        pytest.param(1_776_844_812, "s", "UTC", "2026-04-22T08:00:12.000Z", id="seconds since the epoch"),
        pytest.param(
            1_776_852_012_120,
            "ms",
            "Europe/Berlin",
            "2026-04-22T08:00:12.120Z",
            id="a PLC clock in local time is converted to UTC",
        ),
        pytest.param(0, "ms", "UTC", None, id="0 means never"),
    ],
)
def test_time_text(value: int, unit: str, clock: str, text: str | None) -> None:
    assert time_text(value, unit, clock) == text


def test_subtract_leaves_ranges_of_what_was_not_taken() -> None:
    assert subtract([(2, 9)], {2, 5, 9}) == [(3, 4), (6, 8)]


def test_time_text_never_takes_a_boolean_for_the_number_it_equals() -> None:
    # time_text remembers its answers (a channel's time register repeats): 1 and True, 1 and
    # 1.0 must still be answered apart.
    assert time_text(1) == "1970-01-01T00:00:00.001Z"
    assert time_text(True) is None
    assert time_text(1.0, "s") == "1970-01-01T00:00:01.000Z"
    assert time_text(1, "s") == "1970-01-01T00:00:01.000Z"
    assert time_text(True, "s") is None

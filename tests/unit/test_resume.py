"""The tracker resumed from what the store recorded (contract 3, "After the agent itself restarts").

Table tests of the pure part: a `Resume` in, the first read after the restart, observations out.
The same scenarios run against real processes in `tests/faults/test_resume.py`.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.core.snapshot import ChannelRead, Positions, RingItem, RingRead, Snapshot
from agent.core.tracker import DeviceTracker, Resume

DEV = "PUMP-07"


def snap(boot: str | None, tid: int, ring: RingRead | None = None, state: str = "Trip") -> Snapshot:
    ch = ChannelRead("Trip", tid, state=state, source_timestamp=f"2026-04-22T08:00:{tid % 60:02d}.000Z")
    return Snapshot(
        DEV, "modbus:test", "2026-04-22T09:00:00.000Z", boot, (ch,), boot_where={"register": 0}, ring=ring
    )


def entry(seq: int, tid: int, boot: str = "17") -> RingItem:
    return RingItem(seq, "Trip", tid, boot, "Trip", f"2026-04-22T08:00:{tid % 60:02d}.000Z")


def summary(obs: Any) -> dict[str, Any]:
    return {
        "delivered": [(d.transition_id, d.boot_id, d.live) for d in obs.deliveries],
        "anomalies": [(a.kind, a.boot_id, a.first, a.last) for a in obs.anomalies],
        "boots": [(b.boot_id, b.evidence.get("previous_value")) for b in obs.boots],
    }


@pytest.mark.parametrize(
    ("resume", "read", "expected"),
    [
        pytest.param(
            Resume("17", {"Trip": 3}),
            snap("17", 3),
            {"delivered": [], "anomalies": [], "boots": []},
            id="P3: nothing changed while down: nothing new (not even a re-read)",
        ),
        pytest.param(
            Resume("17", {"Trip": 3}),
            snap("17", 8),
            {"delivered": [("8", "17", True)], "anomalies": [("gap", "17", "4", "7")], "boots": []},
            id="P15: the counter moved on while down: a gap in that boot, nothing invented",
        ),
        pytest.param(
            Resume("17", {"Trip": 3}, ring_head=3),
            snap("17", 8, RingRead(8, 3, (entry(6, 6), entry(7, 7), entry(8, 8)))),
            {
                "delivered": [("6", "17", False), ("7", "17", False), ("8", "17", True)],
                "anomalies": [("overrun", "17", "4", "5")],
                "boots": [],
            },
            id="P15 with a ring of 3: its entries read as buffered data first, an overrun for the rest",
        ),
        pytest.param(
            Resume("17", {"Trip": 3}),
            snap("18", 1),
            {"delivered": [("1", "18", True)], "anomalies": [], "boots": [("18", "17")]},
            id="P16: a new boot while down: previous boot from the store, no gap across boots",
        ),
        pytest.param(
            Resume("17", {"Trip": 3}),
            snap("18", 3),
            {
                "delivered": [("3", "18", True)],
                "anomalies": [("gap", "18", "1", "2")],
                "boots": [("18", "17")],
            },
            id="a boot that began while down counts from 0: what it did before the read is a gap",
        ),
        pytest.param(
            Resume(),
            snap("17", 8),
            {"delivered": [("8", "17", True)], "anomalies": [], "boots": [("17", None)]},
            id="a device the store never saw: its current value, no gap for a boot not watched",
        ),
    ],
)
def test_the_first_read_after_a_restart_is_judged_from_the_store(
    resume: Resume, read: Snapshot, expected: dict[str, Any]
) -> None:
    tracker = DeviceTracker(DEV, ring_mapped=read.ring is not None, resume=resume)
    assert summary(tracker.observe(read)) == expected


def test_a_new_boot_names_the_old_boots_last_recorded_transition_id_in_its_evidence() -> None:
    obs = DeviceTracker(DEV, resume=Resume("17", {"Trip": 3})).observe(snap("18", 1))
    evidence = obs.boots[0].evidence
    assert evidence["previous_value"] == "17"
    assert evidence["previous_boot_last_transitionId"] == {"Trip": "3"}
    assert "last recorded in 17: Trip 3" in evidence["summary"]


def test_each_read_carries_the_positions_it_moved_and_only_those() -> None:
    tracker = DeviceTracker(DEV, ring_mapped=True, resume=Resume("17", {"Trip": 3}, ring_head=3))
    moved = tracker.observe(snap("17", 4, RingRead(4, 8, (entry(4, 4),))))
    assert moved.positions == Positions(DEV, "17", {"Trip": 4}, 4)
    assert not tracker.observe(snap("17", 4)).positions  # unchanged: nothing to record
    booted = tracker.observe(snap("18", 0))
    assert booted.positions == Positions(DEV, "18", {"Trip": 0}, None)


def test_p17_a_counter_reset_within_a_boot_delivers_the_reused_key_for_the_store_to_judge() -> None:
    """No cache in front of the store: T1 again with other content reaches the store (a conflict there)."""
    tracker = DeviceTracker(DEV)
    first = [tracker.observe(snap("17", t, state="Trip" if t % 2 else "Normal")) for t in (1, 2, 3)]
    reset = tracker.observe(snap("17", 0))
    again = tracker.observe(snap("17", 1, state="Normal"))
    assert [d.transition_id for o in first for d in o.deliveries] == ["1", "2", "3"]
    assert [(a.kind, a.first, a.last) for a in reset.anomalies] == [("reset", "3", "0")]
    assert [(d.transition_id, d.payload) for d in again.deliveries] == [("1", {"state": "Normal"})]
    assert again.deliveries[0].payload_hash != first[0].deliveries[0].payload_hash


def test_a_ring_entry_read_live_before_is_not_delivered_again_but_one_with_other_content_is() -> None:
    tracker = DeviceTracker(DEV, ring_mapped=True, resume=Resume("17", {"Trip": 0}, ring_head=0))
    tracker.observe(snap("17", 1, RingRead(1, 8, (entry(1, 1),))))
    reused = RingItem(3, "Trip", 1, "17", "Normal", "2026-04-22T08:59:00.000Z")  # a reset reused T1
    obs = tracker.observe(snap("17", 2, RingRead(3, 8, (entry(1, 1), entry(2, 2), reused))))
    assert [(d.transition_id, d.live) for d in obs.deliveries] == [("1", False), ("2", True)]
    assert obs.deliveries[0].source_timestamp == "2026-04-22T08:59:00.000Z"


def test_a_live_read_of_a_transition_an_opc_ua_event_delivered_is_not_delivered_again() -> None:
    tracker = DeviceTracker(DEV, resume=Resume("17", {"Trip": 0}))
    event = tracker.observe_entries([entry(1, 1)], read_at="x", receiver="opcua:x")
    same = tracker.observe(snap("17", 1))
    other = tracker.observe(snap("17", 2, state="Normal"))
    assert [d.transition_id for d in event.deliveries] == ["1"]
    assert same.deliveries == () and same.positions == Positions(DEV, "17", {"Trip": 1}, None)
    assert [d.transition_id for d in other.deliveries] == ["2"]

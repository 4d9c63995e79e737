"""The alarm decisions of contract section 7 (agent.core.alarms), table by table.

The tracker only says how each event came and what the time away means; whether a refreshed
event is a duplicate or a new canonical is the store's decision, pinned in the store test at
the end (real SQLite file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.alarms import (
    AlarmEvent,
    AlarmMemory,
    AlarmTracker,
    SeenCondition,
    alarm_delivery,
    channel_name,
)
from agent.store.store import Store

GEN, GEN2 = "2026-04-22T08:00:00.000Z", "2026-04-22T09:00:00.000Z"
RX = "opcua:test"


def cond(
    eid: str | None,
    name: str = "HighTemp",
    *,
    t: str = "2026-04-22T08:00:01.000Z",
    active: bool = True,
    **extra: Any,
) -> AlarmEvent:
    fields = {
        "ConditionId": f"nsu=urn:x;s=PLC.{name}",
        "BranchId": None,
        "Time": t,
        "ActiveState/Id": active,
        "AckedState/Id": not active,
        "ConfirmedState/Id": True,
        "EnabledState/Id": True,
        "Retain": True,
    }
    return AlarmEvent("condition", eid, "PLC", name, fields, {"Severity": 700, "Message": "m", **extra})


START, END, REQUIRED = (AlarmEvent(k) for k in ("refresh_start", "refresh_end", "refresh_required"))


def tracker(*, connected_at: str = "t0") -> AlarmTracker:
    t = AlarmTracker("PLC")
    t.connected(GEN, connected_at, start_time=True, receiver=RX)
    return t


def feed(t: AlarmTracker, events: list[AlarmEvent], at: str = "t1") -> Any:
    obs, _ = t.observe(events, at=at, receiver=RX)
    return obs


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([cond("aa")], [("aa", "live")], id="an event outside a bracket is live"),
        pytest.param(
            [START, cond("aa"), END], [("aa", "refresh")], id="an event inside the bracket is refresh"
        ),
        pytest.param(
            [START, cond("aa"), END, cond("bb")],
            [("aa", "refresh"), ("bb", "live")],
            id="after RefreshEnd events are live again",
        ),
        pytest.param([START, END], [], id="the bracket events themselves are never deliveries"),
        pytest.param(
            [cond("aa"), cond("aa")],
            [("aa", "live"), ("aa", "live")],
            id="a repeated EventId is delivered again: only the store decides duplicate",
        ),
    ],
)
def test_how_each_event_came(events: list[AlarmEvent], expected: list[tuple[str, str]]) -> None:
    obs = feed(tracker(), events)
    assert [(d.transition_id, d.via) for d in obs.deliveries] == expected


@pytest.mark.parametrize(
    ("event", "generation", "missing"),
    [
        pytest.param(cond("0a0b"), GEN, (), id="EventId and generation: a complete key"),
        pytest.param(cond(None), GEN, ("transitionId",), id="no EventId: identity incomplete, none made up"),
        pytest.param(cond("0a0b"), None, ("bootId",), id="no generation read: identity incomplete"),
    ],
)
def test_the_key_of_an_alarm_delivery(
    event: AlarmEvent, generation: str | None, missing: tuple[str, ...]
) -> None:
    d = alarm_delivery("PLC", "PLC.HighTemp", event, generation, via="live", at="t", receiver=RX)
    assert d.missing == missing
    assert d.basis == "event_id"
    assert (d.key is None) == bool(missing)
    assert d.source == "PLC/PLC.HighTemp"
    assert d.transition_id == event.event_id
    assert d.source_timestamp == event.fields["Time"]


def test_the_payload_holds_the_transition_fields_and_evidence_the_rest() -> None:
    loud = alarm_delivery("PLC", "c", cond("aa", Message="HIGH!"), GEN, via="live", at="t", receiver=RX)
    quiet = alarm_delivery(
        "PLC", "c", cond("aa", Message="high", Severity=100), GEN, via="refresh", at="t", receiver=RX
    )
    assert sorted(loud.payload) == sorted(
        [
            "ConditionId",
            "BranchId",
            "Time",
            "ActiveState/Id",
            "AckedState/Id",
            "ConfirmedState/Id",
            "EnabledState/Id",
            "Retain",
        ]
    )
    assert loud.payload_hash == quiet.payload_hash  # Message and Severity are evidence: a variant
    assert loud.evidence["Message"] == "HIGH!"
    acked = alarm_delivery("PLC", "c", cond("aa", active=False), GEN, via="live", at="t", receiver=RX)
    assert acked.payload_hash != loud.payload_hash


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{SourceName}.{ConditionName}", "PLC.HighTemp"),
        ("{ConditionName}", "HighTemp"),
        ("alarm-{ConditionName}@{SourceName}", "alarm-HighTemp@PLC"),
    ],
)
def test_channel_names_come_from_source_name_and_condition_name(template: str, expected: str) -> None:
    assert channel_name(template, cond("aa")) == expected


def test_the_first_connect_reports_start_time_and_no_gap() -> None:
    t = AlarmTracker("PLC")
    seen = t.connected(GEN, "t0", start_time=True, receiver=RX)
    assert [(b.boot_id, b.evidence["StartTime"]) for b in seen.boots] == [(GEN, GEN)]
    obs = feed(t, [START, END])
    assert obs.anomalies == ()


def test_a_new_start_time_is_a_boot_with_the_previous_one_in_its_evidence() -> None:
    t = tracker()
    again = t.connected(GEN, "t5", start_time=True, receiver=RX)
    assert again.boots == ()
    new = t.connected(GEN2, "t9", start_time=True, receiver=RX)
    assert [(b.boot_id, b.evidence["previous_StartTime"]) for b in new.boots] == [(GEN2, GEN)]


def test_a_boot_node_generation_leaves_boots_to_the_device_tracker() -> None:
    t = AlarmTracker("PLC")
    assert t.connected("17", "t0", start_time=False, receiver=RX).boots == ()


def test_a_reconnect_gives_a_gap_from_the_last_event_seen_to_the_end_of_the_refresh() -> None:
    t = tracker()
    feed(t, [cond("aa")], at="t1")
    t.connected(GEN, "t5", start_time=True, receiver=RX)
    obs = feed(t, [START, cond("aa"), END], at="t6")
    [gap] = obs.anomalies
    assert (gap.source, gap.boot_id, gap.kind, gap.first, gap.last) == ("PLC/alarms", GEN, "gap", "t1", "t6")
    assert gap.evidence["reason"] == "reconnect"
    assert feed(t, [START, cond("aa"), END], at="t7").anomalies == ()  # one gap per reconnect


def test_a_reconnect_with_nothing_seen_before_starts_the_gap_at_the_previous_connect() -> None:
    t = tracker(connected_at="t0")
    t.connected(GEN, "t5", start_time=True, receiver=RX)
    [gap] = feed(t, [START, END], at="t6").anomalies
    assert (gap.first, gap.last) == ("t0", "t6")


def test_refresh_required_is_a_gap_then_a_refresh() -> None:
    t = tracker()
    feed(t, [cond("aa")], at="t1")
    obs, refresh_now = t.observe([REQUIRED], at="t2", receiver=RX)
    assert refresh_now and obs.anomalies == ()
    [gap] = feed(t, [START, cond("aa"), END], at="t3").anomalies
    assert (gap.first, gap.last, gap.evidence["reason"]) == ("t1", "t3", "RefreshRequired")


def test_a_refused_refresh_ends_the_gap_at_once() -> None:
    t = tracker()
    t.connected(GEN, "t5", start_time=True, receiver=RX)
    [gap] = t.refresh_failed("t6", "BadMethodInvalid").anomalies
    assert (gap.first, gap.last, gap.evidence["refresh_refused"]) == ("t0", "t6", "BadMethodInvalid")


@pytest.mark.parametrize(
    ("before", "refresh", "absent"),
    [
        pytest.param([cond("aa")], [], ["PLC/PLC.HighTemp"], id="active, missing from the refresh: absent"),
        pytest.param([cond("aa")], [cond("aa")], [], id="active and re-sent: nothing to say"),
        pytest.param([cond("aa", active=False)], [], [], id="last seen inactive: nothing to say"),
        pytest.param(
            [cond("aa"), cond("bb", "LowLevel")],
            [cond("bb", "LowLevel")],
            ["PLC/PLC.HighTemp"],
            id="only the condition that is missing",
        ),
    ],
)
def test_absent_at_refresh(before: list[AlarmEvent], refresh: list[AlarmEvent], absent: list[str]) -> None:
    t = tracker()
    feed(t, before)
    obs = feed(t, [START, *refresh, END], at="t9")
    found = [a for a in obs.anomalies if a.kind == "absent_at_refresh"]
    assert [a.source for a in found] == absent
    assert all(a.first == "aa" and a.boot_id == GEN for a in found)
    assert not any(d.payload["ActiveState/Id"] is False for d in obs.deliveries)  # no invented clear
    again = feed(t, [START, *refresh, END], at="t10")
    assert [a for a in again.anomalies if a.kind == "absent_at_refresh"] == []  # said once


def test_an_older_refreshed_state_never_overwrites_a_newer_live_one() -> None:
    t = tracker()
    feed(t, [START, cond("new", t="2026-04-22T08:00:05.000Z", active=False)])  # live inside the bracket
    feed(t, [cond("old", t="2026-04-22T08:00:01.000Z", active=True), END])  # the refreshed copy, older
    assert t.seen["PLC.HighTemp"].event_id == "new"
    assert [a.kind for a in feed(t, [START, END]).anomalies] == []  # the live state (inactive) holds


async def test_the_store_makes_a_known_refreshed_key_a_duplicate_and_an_unknown_one_a_flagged_canonical(
    tmp_path: Path,
) -> None:
    store = await Store.open(tmp_path / "store.db")
    try:
        t = tracker()
        live = feed(t, [cond("aa")]).deliveries
        refreshed = feed(t, [START, cond("aa"), cond("bb", "LowLevel"), END]).deliveries
        results = await store.record([*live, *refreshed])
        assert [(r.decision.value, r.flags) for r in results] == [
            ("inserted", ()),
            ("duplicate", ()),
            ("inserted", ("refresh",)),
        ]
    finally:
        await store.close()


_step = st.one_of(
    st.sampled_from(["start", "end", "required"]),
    st.tuples(
        st.sampled_from(["aa", "bb", "cc", None]), st.sampled_from(["HighTemp", "LowLevel"]), st.booleans()
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=30))
def test_every_condition_event_is_one_delivery_and_via_says_whether_a_bracket_was_open(
    steps: list[Any],
) -> None:
    t = tracker()
    open_ = False
    for step in steps:
        if isinstance(step, str):
            ev = {"start": START, "end": END, "required": REQUIRED}[step]
            obs, _ = t.observe([ev], at="t", receiver=RX)
            assert obs.deliveries == ()
            open_ = {"start": True, "end": False}.get(step, open_)
            assert all(a.kind in ("gap", "absent_at_refresh") for a in obs.anomalies)
            continue
        eid, name, active = step
        obs, refresh_now = t.observe([cond(eid, name, active=active)], at="t", receiver=RX)
        [d] = obs.deliveries
        assert not refresh_now and obs.anomalies == ()
        assert d.via == ("refresh" if open_ else "live")
        assert d.transition_id == eid and (d.key is None) == (eid is None)
        assert not any(a.kind == "gap" for a in obs.anomalies)


@pytest.mark.parametrize(
    ("memory", "gap", "absent"),
    [
        pytest.param(AlarmMemory(), None, [], id="nothing remembered: a first start, no gap"),
        pytest.param(
            AlarmMemory(
                "t1", GEN, (SeenCondition("PLC.HighTemp", "2026-04-22T08:00:01.000Z", True, "aa", GEN),)
            ),
            ("t1", "t6"),
            ["PLC/PLC.HighTemp"],
            id="the store remembers an active alarm: a gap from its arrival, and it is absent",
        ),
        pytest.param(
            AlarmMemory("t1", GEN, (SeenCondition("PLC.HighTemp", None, False, "aa", GEN),)),
            ("t1", "t6"),
            [],
            id="the store remembers it inactive: only the gap",
        ),
    ],
)
def test_the_first_connect_after_an_agent_restart_is_judged_from_the_store(
    memory: AlarmMemory, gap: tuple[str, str] | None, absent: list[str]
) -> None:
    t = AlarmTracker("PLC")
    t.resume(memory)
    boots = t.connected(GEN, "t5", start_time=True, receiver=RX).boots
    assert len(boots) == (0 if memory.generation == GEN else 1)  # a known StartTime is no new boot
    obs = feed(t, [START, END], at="t6")
    gaps = [(a.first, a.last) for a in obs.anomalies if a.kind == "gap"]
    assert gaps == ([gap] if gap else [])
    assert [a.source for a in obs.anomalies if a.kind == "absent_at_refresh"] == absent

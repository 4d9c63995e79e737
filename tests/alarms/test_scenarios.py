"""Scenarios A1-A7 of OPC UA Alarms & Conditions (contract section 7) against the simulator.

Each test starts one simulator (alarm conditions, ConditionRefresh scoped to one subscription)
behind a cuttable TCP link, runs the real agent on a real SQLite store, and reads the store as
`report --json` shows it. "The link" is cut between agent and server (the server keeps its
StartTime and its conditions); "the agent was down" stops the agent and starts it again on the
same store; a server restart changes StartTime and keeps or loses the alarm state.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(60)]

PLC = "PLC-1"
HIGH = f"{PLC}/{PLC}.HighTemp"
LOW = f"{PLC}/{PLC}.LowLevel"
NOTIFIER = f"{PLC}/alarms"


def decisions(arrivals: list[dict[str, Any]]) -> list[tuple[str, str, str, list[str]]]:
    """(source, decision, via, flags) of every arrival, in arrival order."""
    return [(a["source"], a["decision"], a["via"], a["flags"]) for a in arrivals]


def ms_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def refreshed(rig: Any, n: int) -> bool:
    return len(rig.server.alarms.refreshes) >= n


async def refused(rig: Any, n: int) -> bool:
    return len(rig.server.alarms.refused) >= n


async def has_events(view: Any, n: int) -> bool:
    return len(await view.events()) >= n


async def has_arrivals(view: Any, n: int) -> bool:
    return len(await view.arrivals()) >= n


async def has_anomalies(view: Any, n: int) -> bool:
    return len(await view.anomalies()) >= n


async def reconnect(rig: Any, wait_until: Any, while_away: Any = None) -> None:
    """Cut the link, do ``while_away`` on the server, restore: the agent reconnects and refreshes."""
    n = len(rig.server.alarms.refreshes)
    await rig.link.cut()
    if while_away is not None:
        await while_away()
    rig.link.restore()
    await wait_until(lambda: refreshed(rig, n + 1))


async def test_a1_activate_acknowledge_clear_are_three_canonical_events(rig: Any, wait_until: Any) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        ids = [await rig.alarm("HighTemp", a) for a in ("activate", "acknowledge", "clear")]
        await wait_until(lambda: has_events(view, 3))
        events = await view.events()
        assert [(e["source"], e["transitionId"]) for e in events] == [(HIGH, i) for i in ids]
        assert len(set(ids)) == 3
        states = [
            (e["payload"]["ActiveState/Id"], e["payload"]["AckedState/Id"], e["payload"]["Retain"])
            for e in events
        ]
        assert states == [(True, False, True), (True, True, True), (False, True, False)]
        arrivals = await view.arrivals()
        assert decisions(arrivals) == [(HIGH, "inserted", "live", [])] * 3
        assert {x["identity_basis"] for x in [*events, *arrivals]} == {"event_id"}
        assert [b["evidence"]["StartTime"] for b in await view.boots()] == [events[0]["bootId"]]
        assert await view.anomalies() == []


async def test_a2_a_reconnect_while_high_temp_is_active_gives_a_duplicate_and_a_gap(
    rig: Any, wait_until: Any
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
        await reconnect(rig, wait_until)
        await wait_until(lambda: has_arrivals(view, 2))
        await wait_until(lambda: has_anomalies(view, 1))
        assert len(await view.events()) == 1
        arrivals = await view.arrivals()
        assert decisions(arrivals) == [(HIGH, "inserted", "live", []), (HIGH, "duplicate", "refresh", [])]
        assert arrivals[1]["transitionId"] == arrivals[0]["transitionId"]
        assert arrivals[1]["sourceTimestamp"] == arrivals[0]["sourceTimestamp"]
        [gap] = await view.anomalies()
        assert (gap["source"], gap["kind"], gap["bootId"]) == (NOTIFIER, "gap", arrivals[0]["bootId"])
        assert gap["from"] == arrivals[0]["arrivalAt"]  # the last event seen before the link went
        assert gap["to"] >= arrivals[1]["arrivalAt"]


async def test_a2_an_agent_restart_while_high_temp_is_active_gives_a_duplicate(
    rig: Any, wait_until: Any
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
    async with rig.agent() as view:
        await wait_until(lambda: has_arrivals(view, 2))
        await wait_until(lambda: has_anomalies(view, 1))
        assert len(await view.events()) == 1
        first, again = await view.arrivals()
        assert decisions([again]) == [(HIGH, "duplicate", "refresh", [])]
        [gap] = await view.anomalies()  # the store remembered when the agent last heard an alarm
        assert (gap["source"], gap["kind"], gap["from"]) == (NOTIFIER, "gap", first["arrivalAt"])


@pytest.mark.parametrize("away", ["agent down", "link cut"])
async def test_a3_an_alarm_raised_while_away_comes_with_the_refresh_as_one_flagged_canonical(
    rig: Any, wait_until: Any, away: str
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        if away == "link cut":
            await reconnect(rig, wait_until, lambda: rig.alarm("HighTemp", "activate"))
            await wait_until(lambda: has_events(view, 1))
    if away == "agent down":
        await rig.alarm("HighTemp", "activate")
    async with rig.agent() as view:
        await wait_until(lambda: has_events(view, 1))
        [event] = await view.events()
        [arrival] = await view.arrivals()
        assert (arrival["source"], arrival["decision"], arrival["via"]) == (HIGH, "inserted", "refresh")
        assert arrival["flags"] == ["refresh"]
        time_ms = rig.server.alarm_book.condition(PLC, "HighTemp").last.time_ms
        assert event["sourceTimestamp"] == event["payload"]["Time"] == ms_text(time_ms)


async def test_a4_an_alarm_raised_and_cleared_while_the_link_was_cut_is_not_invented_and_a_gap_says_so(
    rig: Any, wait_until: Any
) -> None:
    async def while_away() -> None:
        for action in ("activate", "acknowledge", "clear"):  # Retain false at the end
            await rig.alarm("HighTemp", action)

    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("LowLevel", "activate")
        await wait_until(lambda: has_events(view, 1))
        await reconnect(rig, wait_until, while_away)
        await wait_until(lambda: has_anomalies(view, 1))
        assert [e["source"] for e in await view.events()] == [LOW]
        [low, refreshed_low] = await view.arrivals()
        assert refreshed_low["decision"] == "duplicate"
        [gap] = await view.anomalies()
        assert (gap["source"], gap["kind"]) == (NOTIFIER, "gap")
        assert gap["from"] == low["arrivalAt"] < gap["to"]


async def test_a4_an_agent_that_was_down_invents_nothing_and_says_what_it_could_not_see(
    rig: Any, wait_until: Any
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("LowLevel", "activate")
        await wait_until(lambda: has_events(view, 1))
    for action in ("activate", "acknowledge", "clear"):  # HighTemp came and went: Retain false
        await rig.alarm("HighTemp", action)
    for action in ("acknowledge", "clear"):  # LowLevel, seen active, went while the agent was down
        await rig.alarm("LowLevel", action)
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 2))
        await wait_until(lambda: has_anomalies(view, 2))
        assert [e["source"] for e in await view.events()] == [LOW]  # nothing invented, no clear
        anomalies = {a["kind"]: a for a in await view.anomalies()}
        assert sorted(anomalies) == ["absent_at_refresh", "gap"]
        [low] = await view.arrivals()
        assert (anomalies["gap"]["source"], anomalies["gap"]["from"]) == (NOTIFIER, low["arrivalAt"])
        absent = anomalies["absent_at_refresh"]
        assert (absent["source"], absent["from"]) == (LOW, low["transitionId"])


@pytest.mark.parametrize(
    ("rig", "keep"),
    [
        pytest.param({"event_ids": "counter"}, False, id="restart loses the alarms and reuses EventIds"),
        pytest.param({"event_ids": "unique"}, True, id="restart keeps the pending alarms"),
    ],
    indirect=["rig"],
)
async def test_a5_a_server_restart_is_a_new_generation_and_the_same_alarm_again_a_new_event(
    rig: Any, wait_until: Any, keep: bool
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        first = await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
        n = len(rig.server.alarms.refreshes)
        await rig.server.restart_server(keep_alarms=keep)
        await wait_until(lambda: refreshed(rig, n + 1))
        again = await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 3 if keep else 2))
        boots = await view.boots()
        assert len(boots) == 2
        assert boots[1]["previous_bootId"] == boots[0]["bootId"]
        assert boots[1]["evidence"]["StartTime"] == boots[1]["bootId"]
        events = await view.events()
        keys = [(e["transitionId"], e["bootId"]) for e in events]
        assert len(set(keys)) == len(keys)
        assert (again, boots[1]["bootId"]) in keys
        assert (first, boots[0]["bootId"]) in keys
        anomalies = await view.anomalies()
        if keep:  # the refresh re-sent the pending alarm, under the new generation, flagged
            assert (first, boots[1]["bootId"]) in keys
            assert [a["flags"] for a in await view.arrivals() if a["via"] == "refresh"] == [["refresh"]]
            assert [a["kind"] for a in anomalies] == ["gap"]
        else:  # the EventId came again, the generation keeps them apart; the lost alarm is said
            assert again == first
            assert sorted(a["kind"] for a in anomalies) == ["absent_at_refresh", "gap"]
            absent = [a for a in anomalies if a["kind"] == "absent_at_refresh"]
            assert [(a["source"], a["from"], a["bootId"]) for a in absent] == [
                (HIGH, first, boots[0]["bootId"])
            ]


async def test_a6_one_sessions_refresh_never_reaches_the_other_subscription(
    rig: Any, wait_until: Any
) -> None:
    await rig.alarm("HighTemp", "activate")
    async with rig.agent("one.db") as one:
        await wait_until(lambda: has_events(one, 1))
        async with rig.agent("two.db") as two:
            await wait_until(lambda: has_events(two, 1))
            await rig.alarm("LowLevel", "activate")  # after both refreshes, in order per subscription
            await wait_until(lambda: has_events(one, 2))
            await wait_until(lambda: has_events(two, 2))
            assert len(set(rig.server.alarms.refreshes)) == 2
            for view in (one, two):
                assert decisions(await view.arrivals()) == [
                    (HIGH, "inserted", "refresh", ["refresh"]),
                    (LOW, "inserted", "live", []),
                ]


async def test_a7_refresh_required_gives_a_gap_then_a_refresh_and_no_duplicate_canonical(
    rig: Any, wait_until: Any
) -> None:
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
        rig.server.alarm_book.act(PLC, "LowLevel", "activate")  # lost from the server's queue
        n = len(rig.server.alarms.refreshes)
        await rig.server.alarms.refresh_required()
        await wait_until(lambda: refreshed(rig, n + 1))
        await wait_until(lambda: has_anomalies(view, 1))
        await wait_until(lambda: has_events(view, 2))
        assert sorted(decisions(await view.arrivals())) == [
            (HIGH, "duplicate", "refresh", []),
            (HIGH, "inserted", "live", []),
            (LOW, "inserted", "refresh", ["refresh"]),
        ]
        [gap] = await view.anomalies()
        assert (gap["source"], gap["kind"], gap["evidence"]["reason"]) == (NOTIFIER, "gap", "RefreshRequired")


async def test_a_condition_type_filter_and_own_template_still_give_the_full_payload(
    rig: Any, wait_until: Any
) -> None:
    rig.alarms = {"types": ["i=2782"], "template": "{ConditionName}", "channel": "plc-alarms"}
    async with rig.agent() as view:
        await wait_until(lambda: refreshed(rig, 1))
        await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
        [event] = await view.events()
        assert event["source"] == f"{PLC}/HighTemp"
        assert (event["payload"]["ActiveState/Id"], event["payload"]["AckedState/Id"]) == (True, False)
        assert event["payload"]["ConditionId"] == "nsu=urn:edge-agent:sim;s=PLC-1.Alarms.HighTemp"


async def test_a_server_that_refuses_condition_refresh_still_delivers_live_and_records_the_gap_at_once(
    rig: Any, wait_until: Any
) -> None:
    rig.server.alarms.refuse_refresh = True
    async with rig.agent() as view:
        await wait_until(lambda: refused(rig, 1))
        await rig.alarm("HighTemp", "activate")
        await wait_until(lambda: has_events(view, 1))
        await rig.link.cut()
        await rig.alarm("HighTemp", "acknowledge")  # lost: no refresh brings it
        rig.link.restore()
        await wait_until(lambda: has_anomalies(view, 1))
        await rig.alarm("HighTemp", "clear")
        await wait_until(lambda: has_events(view, 2))
        [gap] = await view.anomalies()
        assert (gap["source"], gap["kind"]) == (NOTIFIER, "gap")
        assert gap["evidence"]["reason"] == "reconnect"
        assert "BadNotSupported" in gap["evidence"]["refresh_refused"]
        assert decisions(await view.arrivals()) == [(HIGH, "inserted", "live", [])] * 2

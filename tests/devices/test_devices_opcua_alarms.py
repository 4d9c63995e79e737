"""The simulator's Alarms & Conditions, seen by a plain asyncua client (no agent code).

Pins what the agent relies on and real servers do (library notes, section 9): events from
the Server object with unique EventIds; ConditionRefresh only on ConditionType, only for the
subscription it names, re-sending the last event of each retained condition unchanged inside
a RefreshStart..RefreshEnd bracket; a restart that keeps or loses the alarm state.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from asyncua import Client, ua

from devices.controller import ChannelSpec, Controller
from devices.opcua_server import OpcUaSimServer

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(30)]
TYPES = [
    ua.ObjectIds.AlarmConditionType,
    ua.ObjectIds.RefreshStartEventType,
    ua.ObjectIds.RefreshEndEventType,
]
NAMES = {ua.ObjectIds.RefreshStartEventType: "start", ua.ObjectIds.RefreshEndEventType: "end"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[OpcUaSimServer]:
    srv = OpcUaSimServer([Controller("PLC-1", [ChannelSpec("Trip")])])
    await srv.start()
    yield srv
    await srv.stop()


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []  # (kind, EventId hex, Time)

    def event_notification(self, ev: Any) -> None:
        f = ev.get_event_props_as_fields_dict()
        kind = NAMES.get(
            f["EventType"].Value.Identifier, f["ConditionName"].Value if "ConditionName" in f else "?"
        )
        self.events.append((kind, f["EventId"].Value.hex(), f["Time"].Value))


async def session(server: OpcUaSimServer) -> tuple[Client, Any, Seen]:
    client = Client(server.endpoint, timeout=2)
    await client.connect()
    seen = Seen()
    sub = await client.create_subscription(20, seen)
    await sub.subscribe_events(client.nodes.server, [ua.NodeId(t) for t in TYPES], queuesize=100)
    return client, sub, seen


async def refresh(client: Client, sub: Any, on: int = ua.ObjectIds.ConditionType) -> None:
    await client.get_node(ua.NodeId(on)).call_method(
        ua.NodeId(ua.ObjectIds.ConditionType_ConditionRefresh),
        ua.Variant(sub.subscription_id, ua.VariantType.UInt32),
    )


async def settle(seen: Seen, n: int) -> None:
    for _ in range(200):
        if len(seen.events) >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(seen.events)} events, expected {n}")


async def test_refresh_resends_the_last_event_of_each_retained_condition_unchanged_to_one_subscription(
    server: OpcUaSimServer,
) -> None:
    server.reset_alarms()
    client, sub, seen = await session(server)
    other, _, other_seen = await session(server)
    try:
        await server.alarm("PLC-1", "HighTemp", "activate")
        await server.alarm("PLC-1", "HighTemp", "acknowledge")
        for action in ("activate", "acknowledge", "clear"):  # Retain false at the end
            await server.alarm("PLC-1", "LowLevel", action)
        await settle(seen, 5)
        await settle(other_seen, 5)
        live = list(seen.events)
        assert len({eid for _, eid, _ in live}) == 5
        await refresh(client, sub)
        await settle(seen, 8)
        kinds = [k for k, _, _ in seen.events[5:]]
        assert kinds == ["start", "HighTemp", "end"]
        assert seen.events[6][1:] == live[1][1:]  # the acknowledgement: same EventId, same Time
        await asyncio.sleep(0.2)
        assert len(other_seen.events) == 5  # the other session's subscription saw no refresh
    finally:
        await client.disconnect()
        await other.disconnect()


@pytest.mark.parametrize(
    ("on", "sub_id", "status"),
    [
        pytest.param(ua.ObjectIds.Server, None, "BadMethodInvalid", id="on the Server object"),
        pytest.param(
            ua.ObjectIds.ConditionType, 999_999, "BadSubscriptionIdInvalid", id="an unknown subscription"
        ),
    ],
)
async def test_refresh_is_refused_where_the_specification_refuses_it(
    server: OpcUaSimServer, on: int, sub_id: int | None, status: str
) -> None:
    client, sub, _ = await session(server)
    try:
        if sub_id is not None:
            sub.subscription_id = sub_id
        with pytest.raises(ua.UaStatusCodeError, match=status):
            await refresh(client, sub, on)
    finally:
        if sub_id is not None:
            sub.subscription_id = None
        await client.disconnect()


@pytest.mark.parametrize("keep", [True, False], ids=["keeping alarm state", "losing alarm state"])
async def test_a_restart_keeps_or_loses_the_pending_alarms(server: OpcUaSimServer, keep: bool) -> None:
    server.reset_alarms()
    await server.alarm("PLC-1", "HighTemp", "activate")
    await server.restart_server(keep_alarms=keep)
    client, sub, seen = await session(server)
    try:
        await refresh(client, sub)
        await settle(seen, 3 if keep else 2)
        assert [k for k, _, _ in seen.events] == (["start", "HighTemp", "end"] if keep else ["start", "end"])
    finally:
        await client.disconnect()

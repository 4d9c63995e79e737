"""asyncua event objects as the agent reads them (agent.sources.opcua.alarms.to_alarm_event).

No server: the events are built as asyncua's client builds them from a notification, one
Variant per selected field, including fields of the wrong type a broken or hostile server may
send. A field of the wrong type is left out (None), never guessed or converted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from asyncua import ua
from asyncua.common.events import Event

from agent.sources.opcua.alarms import node_text, to_alarm_event

VT = ua.VariantType
NAMESPACES = ["http://opcfoundation.org/UA/", "urn:x:server", "urn:plant:plc"]
T = datetime(2026, 4, 22, 8, 0, 12, 120999, tzinfo=UTC)


def event(**fields: tuple[Any, Any]) -> Event:
    base: dict[str, tuple[Any, Any]] = {
        "EventId": (bytes.fromhex("0a0b0c"), VT.ByteString),
        "EventType": (ua.NodeId(ua.ObjectIds.AlarmConditionType), VT.NodeId),
        "SourceName": ("PLC", VT.String),
        "ConditionName": ("HighTemp", VT.String),
        "Time": (T, VT.DateTime),
        "NodeId": (ua.NodeId("PLC.HighTemp", 2), VT.NodeId),
        "BranchId": (ua.NodeId(), VT.NodeId),
        "ActiveState/Id": (True, VT.Boolean),
        "AckedState/Id": (False, VT.Boolean),
        "ConfirmedState/Id": (True, VT.Boolean),
        "EnabledState/Id": (True, VT.Boolean),
        "Retain": (True, VT.Boolean),
        "Severity": (700, VT.UInt16),
        "Message": (ua.LocalizedText("too hot"), VT.LocalizedText),
    }
    base.update(fields)
    ev = Event()
    for name, (value, vtype) in base.items():
        ev.add_property(name, value, vtype)
    return ev


def test_a_condition_event_as_plain_values() -> None:
    ev = to_alarm_event(event(), NAMESPACES)
    assert (ev.kind, ev.event_id, ev.source_name, ev.condition_name) == (
        "condition",
        "0a0b0c",
        "PLC",
        "HighTemp",
    )
    assert ev.fields == {
        "ConditionId": "nsu=urn:plant:plc;s=PLC.HighTemp",
        "BranchId": None,
        "Time": "2026-04-22T08:00:12.120Z",
        "ActiveState/Id": True,
        "AckedState/Id": False,
        "ConfirmedState/Id": True,
        "EnabledState/Id": True,
        "Retain": True,
    }
    assert (ev.evidence["Severity"], ev.evidence["Message"]) == (700, "too hot")


@pytest.mark.parametrize(
    ("type_id", "kind"),
    [
        (ua.ObjectIds.RefreshStartEventType, "refresh_start"),
        (ua.ObjectIds.RefreshEndEventType, "refresh_end"),
        (ua.ObjectIds.RefreshRequiredEventType, "refresh_required"),
        (ua.ObjectIds.OffNormalAlarmType, "condition"),
    ],
)
def test_the_event_type_says_bracket_or_condition(type_id: int, kind: str) -> None:
    assert to_alarm_event(event(EventType=(ua.NodeId(type_id), VT.NodeId)), NAMESPACES).kind == kind


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        pytest.param(
            "EventId", ("0a0b0c", VT.String), lambda e: e.event_id is None, id="an EventId as text: none"
        ),
        pytest.param(
            "EventId", (b"", VT.ByteString), lambda e: e.event_id is None, id="an empty EventId: none"
        ),
        pytest.param(
            "Time", (12345, VT.Int64), lambda e: e.fields["Time"] is None, id="a Time that is no time"
        ),
        pytest.param(
            "ActiveState/Id",
            (1, VT.Int32),
            lambda e: e.fields["ActiveState/Id"] is None,
            id="a state id as a number",
        ),
        pytest.param(
            "SourceName",
            ("x" * 100_000, VT.String),
            lambda e: len(e.source_name) == 1024,
            id="a huge SourceName is cut",
        ),
        pytest.param(
            "NodeId",
            (ua.NodeId("C", 9), VT.NodeId),
            lambda e: e.fields["ConditionId"] == "ns=9;s=C",
            id="a namespace index the table lacks stays an index",
        ),
    ],
)
def test_a_field_of_the_wrong_kind_is_left_out_never_guessed(
    field: str, value: tuple[Any, Any], check: Any
) -> None:
    assert check(to_alarm_event(event(**{field: value}), NAMESPACES))


def test_node_ids_in_namespace_zero_keep_their_short_form() -> None:
    assert node_text(ua.NodeId(2253), NAMESPACES) == "i=2253"
    assert node_text(ua.NodeId(), NAMESPACES) is None
    assert node_text("ns=2;s=x", NAMESPACES) is None

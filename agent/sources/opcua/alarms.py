"""OPC UA Alarms & Conditions on one connection: the event subscription, ConditionRefresh, and
asyncua's event objects turned into :class:`agent.core.alarms.AlarmEvent`.

Holds :class:`AlarmLink` (the alarm side of one session) and the conversion of one event. It
must not decide anything: the bracket, gaps and anomalies are :class:`agent.core.alarms.AlarmTracker`.

* The event monitored item on the notifier (default the Server object) passes the configured
  condition types plus RefreshStart (i=2787), RefreshEnd (i=2788) and RefreshRequired (i=2789),
  and selects the fields of AlarmConditionType (asyncua adds the ConditionId as ``NodeId``). The
  item gets a real queue (``alarms.queue``): with a queue of 1 a server may drop transitions.
* ConditionRefresh is method i=3875 called on ConditionType (i=2782) with this subscription's
  id: on the Server object it fails with ``BadMethodInvalid``. It runs after every subscribe,
  i.e. after every (re)connect (the source builds a new session each time; asyncua's own
  auto-reconnect would restore subscriptions without calling it), and after RefreshRequired.
* The handler is synchronous and only appends (asyncua 2.x runs each notification in its own
  task; async handlers would finish out of order), so the bracket order is kept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncua
from asyncua.common.events import get_filter_from_event_type

from agent.config.sources import Alarms
from agent.core.alarms import PAYLOAD_FIELDS, AlarmEvent, Kind
from agent.sources.opcua.events import SubscriptionHandler, ua_time
from agent.sources.opcua.session import node
from agent.sources.opcua.values import MAX_TEXT

ua: Any = asyncua.ua
OIDS: Any = ua.ObjectIds
BRACKET: dict[int, Kind] = {
    OIDS.RefreshStartEventType: "refresh_start",
    OIDS.RefreshEndEventType: "refresh_end",
    OIDS.RefreshRequiredEventType: "refresh_required",
}
STATE_IDS = ("ActiveState/Id", "AckedState/Id", "ConfirmedState/Id", "EnabledState/Id", "Retain")


def node_text(nid: Any, namespaces: list[str]) -> str | None:
    """A NodeId in ``nsu=`` form (namespace URI, not index: indexes differ between servers and
    restarts); None for a null NodeId or what is no NodeId."""
    if not isinstance(nid, ua.NodeId) or nid.is_null():
        return None
    text: str = nid.to_string()
    if nid.NamespaceIndex == 0:
        return text
    uri = namespaces[nid.NamespaceIndex] if nid.NamespaceIndex < len(namespaces) else None
    rest = text.split(";", 1)[1] if ";" in text else text
    return f"nsu={uri};{rest}" if uri else text


def _text(value: Any) -> str | None:
    if isinstance(value, ua.LocalizedText):
        value = value.Text
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return None


def _value(fields: dict[str, Any], name: str) -> Any:
    v = fields.get(name)
    return v.Value if isinstance(v, ua.Variant) else v


def to_alarm_event(event: Any, namespaces: list[str]) -> AlarmEvent:
    """One asyncua event as plain values (a field of the wrong type is left out, never guessed)."""
    f = event.get_event_props_as_fields_dict()
    etype = _value(f, "EventType")
    type_id = etype.Identifier if isinstance(etype, ua.NodeId) and etype.NamespaceIndex == 0 else None
    kind: Kind = BRACKET.get(type_id, "condition") if isinstance(type_id, int) else "condition"
    eid = _value(f, "EventId")
    event_id = eid.hex() if isinstance(eid, bytes) and eid else None
    evidence: dict[str, Any] = {
        "EventType": node_text(etype, namespaces),
        "Severity": _value(f, "Severity") if isinstance(_value(f, "Severity"), int) else None,
        "Message": _text(_value(f, "Message")),
        "SourceNode": node_text(_value(f, "SourceNode"), namespaces),
        "ReceiveTime": ua_time(_value(f, "ReceiveTime")),
    }
    if kind != "condition":
        return AlarmEvent(kind, event_id, evidence=evidence)
    t = _value(f, "Time")
    fields: dict[str, Any] = {
        "ConditionId": node_text(_value(f, "NodeId"), namespaces),
        "BranchId": node_text(_value(f, "BranchId"), namespaces),
        "Time": ua_time(t) if isinstance(t, datetime) else None,
    }
    for name in STATE_IDS:
        v = _value(f, name)
        fields[name] = v if isinstance(v, bool) else None
    assert set(fields) == set(PAYLOAD_FIELDS)
    return AlarmEvent(
        kind,
        event_id,
        _text(_value(f, "SourceName")),
        _text(_value(f, "ConditionName")),
        fields,
        evidence,
    )


class AlarmLink:
    """The alarm subscription of one session (a new one per connect)."""

    def __init__(self, client: Any, cfg: Alarms, publishing: float) -> None:
        self.client, self.cfg, self.publishing = client, cfg, publishing
        self.handler = SubscriptionHandler()  # synchronous on purpose, as for the channels
        self.sub: Any = None
        self.namespaces: list[str] = []

    async def open(self, idx: int | None) -> None:
        """The namespace table (for ``nsu=`` ids), then the event subscription."""
        self.namespaces = list(await self.client.get_namespace_array())
        self.sub = await self.client.create_subscription(self.publishing * 1000, self.handler)
        bracket = [self.client.get_node(ua.NodeId(t)) for t in BRACKET]
        wanted = [node(self.client, t, idx) for t in self.cfg.types] + bracket
        # The select clauses always name the AlarmConditionType fields the contract needs, whatever
        # the type filter: asyncua would select only the fields of the types given, so a filter
        # on ConditionType (i=2782) would leave out ActiveState/Id and AckedState/Id.
        fields = await get_filter_from_event_type(
            [self.client.get_node(ua.NodeId(OIDS.AlarmConditionType)), *bracket], False
        )
        where = await get_filter_from_event_type(wanted, True)
        evfilter = ua.EventFilter(SelectClauses=fields.SelectClauses, WhereClause=where.WhereClause)
        notifier = node(self.client, self.cfg.notifier, idx)
        await self.sub.subscribe_events(notifier, wanted, evfilter=evfilter, queuesize=self.cfg.queue)

    async def refresh(self) -> None:
        """ConditionRefresh for this subscription (raises ua.UaError when the server refuses)."""
        await self.client.get_node(ua.NodeId(OIDS.ConditionType)).call_method(
            ua.NodeId(OIDS.ConditionType_ConditionRefresh),
            ua.Variant(self.sub.subscription_id, ua.VariantType.UInt32),
        )

    def take(self) -> list[AlarmEvent]:
        return [to_alarm_event(ev, self.namespaces) for ev in self.handler.take_events()]

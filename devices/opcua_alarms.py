"""OPC UA Alarms & Conditions on the simulator's asyncua server: what asyncua's server lacks.

Holds :class:`OpcUaAlarms`: condition events from the Server object, ConditionRefresh scoped to
one subscription, and RefreshRequired. The condition state is :class:`devices.alarm_model.AlarmBook`.

asyncua 2.1's server has no alarm conditions of its own, and its optional ConditionRefresh
(``bind_condition_methods``, off by default) keeps the *event generator's* event object, which
the next trigger mutates (new EventId and Time), so a refresh would not re-send the last event
as it was. Here every event is its own object, kept as the condition's last event, and the
refresh answers per OPC 10000-9 5.5.7:

* only on ConditionType (i=2782); called on any other object it answers ``BadMethodInvalid``;
* only to the subscription whose id it is given (``BadSubscriptionIdInvalid`` for an unknown
  one): RefreshStartEvent, the last event of every retained condition with its own EventId and
  Time, RefreshEndEvent; the bracket events get new EventIds each time.

Events are emitted by the Server object (i=2253), where stock PLCs emit them and where asyncua
delivers them (it does not forward events from other objects up to the Server).
"""

from __future__ import annotations

import copy
import os
from datetime import UTC, datetime
from typing import Any

import asyncua
from asyncua.common import events as ua_events

from devices.alarm_model import AlarmBook, AlarmEvent

ua: Any = asyncua.ua
OIDS: Any = ua.ObjectIds


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class OpcUaAlarms:
    """The alarm side of one asyncua server; ``ns_index`` is the simulator's namespace."""

    def __init__(self, book: AlarmBook, ns_index: int) -> None:
        self.book = book
        self.ns_index = ns_index
        self._server: Any = None
        self._templates: dict[int, Any] = {}
        self._objects: dict[bytes, Any] = {}
        self.refreshes: list[int] = []  # subscription ids refreshed, for tests
        # A status name (e.g. "BadNotImplemented"): ConditionRefresh answers it, as a server without refresh
        self.refuse_refresh: str | None = None
        self.refused: list[int] = []  # subscription ids whose refresh was refused

    async def install(self, server: Any) -> None:
        """Event templates and the ConditionRefresh callback (after ``server.init()``)."""
        self._server = server
        for tid in (
            OIDS.AlarmConditionType,
            OIDS.RefreshStartEventType,
            OIDS.RefreshEndEventType,
            OIDS.RefreshRequiredEventType,
        ):
            ev: Any = await ua_events.get_event_obj_from_type_node(server.get_node(ua.NodeId(tid)))
            if tid == OIDS.AlarmConditionType:
                ev.add_property("NodeId", None, ua.VariantType.NodeId)  # the ConditionId field
            ev.emitting_node = ua.NodeId(OIDS.Server)
            ev.SourceNode = ua.NodeId(OIDS.Server)
            ev.SourceName = "Server"
            self._templates[tid] = ev
        session = server.iserver.isession
        for method in (OIDS.ConditionType_ConditionRefresh, OIDS.ConditionType_ConditionRefresh2):
            session.add_method_callback(ua.NodeId(method), self._refresh_call)

    def forget_objects(self) -> None:
        """Drop the kept event objects of conditions the book no longer has (after a restart)."""
        kept = {e.event_id for e in self.book.retained()}
        self._objects = {k: v for k, v in self._objects.items() if k in kept}

    # --- emitting --------------------------------------------------------------------------

    async def emit(self, ev: AlarmEvent, subscription_id: int | None = None) -> None:
        """Send one condition event to every subscription (or one), keeping its object for refresh."""
        obj = self._objects.get(ev.event_id)
        if obj is None or obj.Message.Text != ev.message:
            obj = self._objects[ev.event_id] = self._condition_object(ev)
        await self._send(obj, subscription_id)

    async def refresh_required(self, subscription_id: int | None = None) -> None:
        """A RefreshRequiredEvent: the server lost events of its queue; the client must refresh."""
        required = self._system_event(OIDS.RefreshRequiredEventType, "RefreshRequired")
        await self._send(required, subscription_id)

    def _condition_object(self, ev: AlarmEvent) -> Any:
        obj = copy.deepcopy(self._templates[OIDS.AlarmConditionType])
        obj.emitting_node = ua.NodeId(OIDS.Server)
        obj.EventId = ua.Variant(ev.event_id, ua.VariantType.ByteString)
        obj.EventType = ua.NodeId(OIDS.AlarmConditionType)
        obj.SourceNode = ua.NodeId(ev.controller, self.ns_index)
        obj.SourceName = ev.controller
        obj.NodeId = ua.NodeId(f"{ev.controller}.Alarms.{ev.condition}", self.ns_index)
        obj.ConditionName = ev.condition
        obj.BranchId = ua.NodeId()
        obj.Time = _dt(ev.time_ms)
        obj.ReceiveTime = datetime.now(UTC)
        obj.Message = ua.LocalizedText(ev.message)
        obj.Severity = ev.severity
        obj.Retain = ev.retain
        states = (
            ("EnabledState", ev.enabled, "Enabled", "Disabled"),
            ("ActiveState", ev.active, "Active", "Inactive"),
            ("AckedState", ev.acked, "Acknowledged", "Unacknowledged"),
            ("ConfirmedState", ev.confirmed, "Confirmed", "Unconfirmed"),
        )
        for name, value, yes, no in states:
            setattr(obj, name, ua.LocalizedText(yes if value else no))
            setattr(obj, f"{name}/Id", value)
        return obj

    def _system_event(self, type_id: int, message: str) -> Any:
        obj = copy.deepcopy(self._templates[type_id])
        obj.emitting_node = ua.NodeId(OIDS.Server)
        obj.EventId = ua.Variant(os.urandom(16), ua.VariantType.ByteString)
        obj.EventType = ua.NodeId(type_id)
        obj.Time = obj.ReceiveTime = datetime.now(UTC)
        obj.Message = ua.LocalizedText(message)
        obj.Severity = 1
        return obj

    async def _send(self, obj: Any, subscription_id: int | None) -> None:
        subs = self._server.iserver.subscription_service.subscriptions
        targets = [subs[subscription_id]] if subscription_id is not None else list(subs.values())
        for sub in targets:
            await sub.monitored_item_srv.trigger_event(obj)

    # --- ConditionRefresh --------------------------------------------------------------------

    async def _refresh_call(self, parent: Any, *args: Any) -> Any:
        """The method call: ObjectId must be ConditionType; the first argument the subscription id."""
        if parent != ua.NodeId(OIDS.ConditionType):
            return ua.StatusCode(ua.StatusCodes.BadMethodInvalid)
        if self.refuse_refresh:
            self.refused.append(int(args[0].Value) if args else 0)
            return ua.StatusCode(getattr(ua.StatusCodes, self.refuse_refresh))
        if not args or not isinstance(args[0].Value, int):
            return ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
        sub_id = int(args[0].Value)
        if sub_id not in self._server.iserver.subscription_service.subscriptions:
            return ua.StatusCode(ua.StatusCodes.BadSubscriptionIdInvalid)
        await self.refresh(sub_id)
        return []

    async def refresh(self, subscription_id: int) -> None:
        """The bracket and, inside it, the last event of every retained condition, to one subscription."""
        self.refreshes.append(subscription_id)
        await self._send(self._system_event(OIDS.RefreshStartEventType, "RefreshStart"), subscription_id)
        for ev in self.book.retained():
            await self.emit(ev, subscription_id)
        await self._send(self._system_event(OIDS.RefreshEndEventType, "RefreshEnd"), subscription_id)

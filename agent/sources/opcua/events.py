"""What OPC UA subscriptions hand the agent: a trigger to read, and transition events.

Holds the synchronous subscription handler and the conversion of one TransitionEventType
event into a RingItem. It must not assemble snapshots from notifications or do I/O.

Handlers are synchronous and only set an event / append to a list: asyncua 2.x runs each
notification in its own task, and async handlers finish out of order.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agent.config.sources import Device, Field
from agent.core.snapshot import RingItem
from agent.core.timestamps import format_timestamp
from agent.sources.base import StateLog
from agent.sources.opcua.values import scalar_problem
from agent.sources.readings import (
    BadValue,
    boot_number,
    identity_number,
    payload_value,
    ring_channel,
    timestamp_value,
)

EVENT_FIELDS = ("Channel", "TransitionId", "BootId", "State", "SourceTime")
EVENT_SELECT = (*EVENT_FIELDS, "Time")  # every field `event_item` reads: the subscription asks for these only


class SubscriptionHandler:
    """asyncua subscription handler of the channels' and of the alarms' subscription: synchronous on
    purpose (see the module docstring)."""

    def __init__(self) -> None:
        self.trigger = asyncio.Event()
        self.events: list[Any] = []

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        self.trigger.set()

    def event_notification(self, event: Any) -> None:
        self.events.append(event)
        self.trigger.set()

    def status_change_notification(self, status: Any) -> None:
        self.trigger.set()

    def take_events(self) -> list[Any]:
        """The events received since the last call; clears the trigger for the read they cause."""
        self.trigger.clear()
        return self.drain()

    def drain(self) -> list[Any]:
        """The events received since the last call, leaving the trigger as it is (what else
        arrived still causes a read)."""
        events, self.events = self.events, []
        return events


def ua_time(value: Any) -> str | None:
    """An OPC UA DateTime as contract text (naive means UTC); None for what is no datetime."""
    if not isinstance(value, datetime):
        return None
    return format_timestamp(value if value.tzinfo else value.replace(tzinfo=UTC))


def event_item(dev: Device, ev: Any, errors: StateLog) -> RingItem | None:
    """A TransitionEventType event as an entry with full identity (BootId 0 = none); None for an
    event whose fields are refused (docs/pollers.md, "Bad values")."""
    fields = {k: getattr(ev, k, None) for k in EVENT_FIELDS}
    if any(scalar_problem(v) is not None for v in fields.values()):
        errors.set("events", f"event refused: a field is no single value ({sorted(fields)})")
        return None
    try:
        tid = identity_number(fields["TransitionId"] or 0)
        boot = boot_number(fields["BootId"] or 0)
    except BadValue as exc:
        errors.set("events", f"event refused: {exc}")
        return None
    ch = ring_channel(dev, fields["Channel"])
    state, _ = payload_value(fields["State"])
    if ch is None or state is None:
        return None
    errors.set("events", None)
    ts_field: Field | None = ch.source_timestamp
    stime = fields["SourceTime"]
    ts = timestamp_value(stime, ts_field)[0] if isinstance(stime, int) and ts_field else None
    if ch.time_from_state:
        ts = ua_time(getattr(ev, "Time", None))
    return RingItem(
        seq=0,
        channel=ch.name,
        transition_id=tid,
        boot_id=boot,
        state=ch.state.values.get(state, state) if isinstance(state, int) else state,
        source_timestamp=ts,
        raw={"event": {**fields, "TransitionId": tid}},
    )

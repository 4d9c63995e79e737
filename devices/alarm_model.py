"""Alarm conditions of a simulated controller (pure: state and events, no server).

Holds :class:`AlarmBook`, the OPC UA Alarms & Conditions state of every condition of the
simulated controllers, and the record of one condition event. The OPC UA side
(:mod:`devices.opcua_alarms`) turns these records into events; nothing here does I/O.

One condition follows OPC 10000-9 in the small part a PLC's alarm uses:

* ``activate``: ActiveState true, AckedState false (a new alarm waits for an operator);
* ``acknowledge``: AckedState true;
* ``clear``: ActiveState false.

``Retain`` is true while the condition is active or not yet acknowledged: a condition that
cleared after its acknowledgement (or was acknowledged after it cleared) is no longer retained
and a ConditionRefresh does not send it. Every transition is one event with its own
``EventId``; the book keeps the last event of every condition, which is what a refresh re-sends
(same ``EventId``, same ``Time``, same fields).

EventIds: ``unique`` builds them like node-opcua (16 random bytes chosen per server
generation plus a counter), so they differ across restarts; ``counter`` is a plain 8-byte
counter that starts again at 1 after a restart that loses the alarm state, so a restarted
server reuses EventIds (the specification allows it). Both kinds exist in the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

EventIdKind = Literal["unique", "counter"]
ACTIONS = ("activate", "acknowledge", "clear")


@dataclass(frozen=True)
class AlarmEvent:
    """One condition event as the server sends it (and re-sends it on a refresh)."""

    event_id: bytes
    controller: str
    condition: str
    time_ms: int
    active: bool
    acked: bool
    confirmed: bool
    enabled: bool
    retain: bool
    severity: int
    message: str


@dataclass
class Condition:
    controller: str
    name: str
    severity: int = 700
    active: bool = False
    acked: bool = True
    last: AlarmEvent | None = None

    @property
    def retain(self) -> bool:
        return self.active or not self.acked


class AlarmBook:
    """Every condition of the simulated controllers, keyed by (controller, condition name)."""

    def __init__(self, clock_ms: Callable[[], int], event_ids: EventIdKind = "unique") -> None:
        self.clock_ms = clock_ms
        self.event_ids: EventIdKind = event_ids
        self.conditions: dict[tuple[str, str], Condition] = {}
        self._prefix = os.urandom(16)
        self._counter = 0

    def condition(self, controller: str, name: str, severity: int = 700) -> Condition:
        """The condition, created (inactive, acknowledged, not retained) on first use."""
        key = (controller, name)
        if key not in self.conditions:
            self.conditions[key] = Condition(controller, name, severity)
        return self.conditions[key]

    def act(self, controller: str, name: str, action: str, *, time_ms: int | None = None) -> AlarmEvent:
        """One transition (``activate``, ``acknowledge`` or ``clear``) and its event."""
        if action not in ACTIONS:
            raise ValueError(f"unknown alarm action {action!r} (one of {', '.join(ACTIONS)})")
        cond = self.condition(controller, name)
        if action == "activate":
            cond.active, cond.acked = True, False
        elif action == "acknowledge":
            cond.acked = True
        else:
            cond.active = False
        text = {"activate": "active", "acknowledge": "acknowledged", "clear": "cleared"}[action]
        ev = AlarmEvent(
            event_id=self._next_event_id(),
            controller=controller,
            condition=name,
            time_ms=self.clock_ms() if time_ms is None else time_ms,
            active=cond.active,
            acked=cond.acked,
            confirmed=True,
            enabled=True,
            retain=cond.retain,
            severity=cond.severity,
            message=f"{name} {text}",
        )
        cond.last = ev
        return ev

    def retained(self) -> list[AlarmEvent]:
        """The last event of every retained condition: what a ConditionRefresh re-sends."""
        return [c.last for c in self.conditions.values() if c.retain and c.last is not None]

    def restart(self, *, keep: bool) -> None:
        """A server restart: a new EventId prefix; ``keep`` False loses every condition's state (as
        node-opcua does) and a ``counter`` server starts again at 1, reusing EventIds; True keeps
        pending alarms (as an S7-1500 does) and their EventIds, so the counter goes on."""
        self._prefix = os.urandom(16)
        if not keep:
            self._counter = 0
            self.conditions.clear()

    def reset(self, event_ids: EventIdKind | None = None) -> None:
        """Forget every condition and start the EventIds again (a test's fresh start)."""
        self.event_ids = event_ids or self.event_ids
        self.restart(keep=False)

    def reword(self, controller: str, name: str, message: str) -> None:
        """Change the Message of a condition's last event (a refreshed copy may differ in it)."""
        cond = self.conditions[(controller, name)]
        if cond.last is not None:
            cond.last = replace(cond.last, message=message)

    def _next_event_id(self) -> bytes:
        self._counter += 1
        if self.event_ids == "counter":
            return self._counter.to_bytes(8, "big")
        return self._prefix + self._counter.to_bytes(4, "big")

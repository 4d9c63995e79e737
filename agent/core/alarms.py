"""OPC UA Alarms & Conditions: from condition events to deliveries, gaps and anomalies (pure).

Holds :class:`AlarmEvent` (one notification, as plain values), :func:`alarm_delivery` (the one
place an alarm delivery is made) and :class:`AlarmTracker`, the decisions of contract section 7
for one device over its connections. No I/O, no clock, no asyncio: the source converts asyncua's
events and passes the times in.

* **Identity.** ``source`` = ``<device>/`` + the channel made from ``SourceName`` and
  ``ConditionName`` by the configured template; ``transitionId`` = the ``EventId`` as lowercase
  hex (opaque; an event without one is ``identity_incomplete``); ``bootId`` = the server
  generation read at connect (``ServerStatus/StartTime``, or the device's boot node). The
  payload is the transition fields only; Severity, Message and the rest are evidence.
* **Refresh bracket.** Between RefreshStart and RefreshEnd every condition event is delivered
  with ``via`` ``refresh``, otherwise ``live``. The store decides: a known key is a duplicate,
  an unknown one a canonical flagged ``refresh``. The bracket events are never deliveries.
* **Gap per reconnect.** Refresh re-sends only the last event of retained conditions, so what
  happened while away may be lost: after every reconnect (also the first connect after the
  agent restarted, from the store's :class:`AlarmMemory`; not the very first one) a ``gap``
  record on ``<device>/<channel>`` covers the time from the last event seen to the end of the
  refresh. ``RefreshRequired`` is the same: a gap, then a refresh (the source calls it).
* **Absent at refresh.** A condition last seen active that the refresh does not re-send gets
  an ``absent_at_refresh`` anomaly on its own source, never an invented clear.
* **Older never overwrites newer.** The remembered state of a condition moves only to an event
  whose ``Time`` is not older than the one remembered.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.core.basis import IdentityBasis
from agent.core.contract import Anomaly, Delivery, payload_hash
from agent.core.decide import BootSighting
from agent.core.snapshot import Observations

Kind = Literal["condition", "refresh_start", "refresh_end", "refresh_required", "other"]
ABSENT_AT_REFRESH = "absent_at_refresh"
REFRESH = "refresh"
LIVE = "live"
PAYLOAD_FIELDS = (
    "ConditionId",
    "BranchId",
    "Time",
    "ActiveState/Id",
    "AckedState/Id",
    "ConfirmedState/Id",
    "EnabledState/Id",
    "Retain",
)
SEP = (",", ":")
DEFAULT_TEMPLATE = "{SourceName}.{ConditionName}"


@dataclass(frozen=True, slots=True)
class AlarmEvent:
    """One event notification as plain values. ``fields`` holds the payload fields by their
    contract names (``Time`` as contract text, ConditionId in ``nsu=`` form); ``evidence`` the
    other selected fields (Severity, Message, EventType, ...)."""

    kind: Kind
    event_id: str | None = None
    source_name: str | None = None
    condition_name: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def time(self) -> str | None:
        t = self.fields.get("Time")
        return t if isinstance(t, str) else None

    @property
    def active(self) -> bool:
        return self.fields.get("ActiveState/Id") is True


@dataclass(frozen=True, slots=True)
class SeenCondition:
    """The latest state of one condition as the store holds it (its latest ``Time``)."""

    channel: str
    time: str | None
    active: bool
    event_id: str | None
    generation: str | None


@dataclass(frozen=True, slots=True)
class AlarmMemory:
    """What the store holds of a device's alarms, so a tracker judges the first connect after the
    agent restarts as if it had never been away (contract section 3): a gap from the last alarm
    arrival, ``absent_at_refresh`` for alarms last seen active."""

    last_event_at: str | None = None
    generation: str | None = None
    conditions: tuple[SeenCondition, ...] = ()


AlarmMemoryReader = Callable[[str], Awaitable[AlarmMemory]]  # device name -> its memory


def channel_name(template: str, ev: AlarmEvent) -> str:
    """The channel of a condition: the template filled with SourceName and ConditionName."""
    return template.format(SourceName=ev.source_name or "", ConditionName=ev.condition_name or "")


def alarm_delivery(
    device: str, channel: str, ev: AlarmEvent, generation: str | None, *, via: str, at: str, receiver: str
) -> Delivery:
    """The delivery of one condition event (the one place alarm deliveries are made)."""
    payload = {k: ev.fields.get(k) for k in PAYLOAD_FIELDS}
    ts = ev.time
    evidence: dict[str, Any] = {
        "via": via,
        "SourceName": ev.source_name,
        "ConditionName": ev.condition_name,
        **ev.evidence,
    }
    return Delivery(
        source=f"{device}/{channel}",
        transition_id=ev.event_id or None,
        boot_id=generation,
        source_timestamp=ts,
        arrival_at=at,
        payload=payload,
        payload_hash=payload_hash(payload, ts),
        raw=json.dumps({"event": {**payload, **evidence}}, sort_keys=True, default=str, separators=SEP),
        receiver=receiver,
        live=True,
        missing=tuple(n for n, v in (("transitionId", ev.event_id), ("bootId", generation)) if not v),
        evidence=evidence,
        via=via,
        basis=IdentityBasis.EVENT_ID,
    )


@dataclass(slots=True)
class _Seen:
    """What the tracker remembers of one condition: its last event's time, state and key."""

    time: str | None
    active: bool
    event_id: str | None
    generation: str | None


class AlarmTracker:
    """Section 7 for one device: owns no connection, keeps its memory across reconnects.

    Call order per connection: :meth:`connected` (after the subscription exists, before the
    ConditionRefresh call), then :meth:`observe` with every batch of notifications, and
    :meth:`refresh_failed` if the ConditionRefresh call was refused.
    """

    def __init__(self, device: str, *, template: str = DEFAULT_TEMPLATE, channel: str = "alarms") -> None:
        self.device, self.template, self.channel = device, template, channel
        self.generation: str | None = None
        self.connections = 0
        self.in_refresh = False
        self.last_event_at: str | None = None
        self.connected_at: str | None = None
        self.gap_from: str | None = None
        self.gap_reason = ""
        self.refreshed: set[str] = set()
        self.seen: dict[str, _Seen] = {}

    def resume(self, memory: AlarmMemory) -> None:
        """Before the first connect: take what the store remembers (nothing: a first start)."""
        if self.connections or memory.last_event_at is None:
            return
        self.last_event_at = self.connected_at = memory.last_event_at
        self.generation = memory.generation
        self.connections = 1  # the coming connect is a reconnect: the time away is a gap
        for c in memory.conditions:
            self.seen[c.channel] = _Seen(c.time, c.active, c.event_id, c.generation)

    def connected(self, generation: str | None, at: str, *, start_time: bool, receiver: str) -> Observations:
        """A (re)connect read ``generation``; a BootObserved when it is a new StartTime.

        ``start_time`` says the generation is ``ServerStatus/StartTime`` (otherwise the device's
        boot node, whose own tracker reports boots). From the second connect on, a gap is due at
        the end of the refresh."""
        boots: list[BootSighting] = []
        if start_time and generation is not None and generation != self.generation:
            evidence: dict[str, Any] = {"StartTime": generation, "receiver": receiver}
            summary = f"ServerStatus/StartTime read as {generation}"
            if self.generation is not None:
                evidence["previous_StartTime"] = self.generation
                summary = f"ServerStatus/StartTime changed from {self.generation} to {generation}"
            evidence["summary"] = summary
            boots.append(BootSighting(self.device, generation, at, None, True, evidence))
        if self.connections:
            self._gap_due(at, "reconnect")
        self.connections += 1
        self.connected_at = at
        self.generation = generation
        self.in_refresh = False
        return Observations(boots=tuple(boots))

    def observe(self, events: Iterable[AlarmEvent], *, at: str, receiver: str) -> tuple[Observations, bool]:
        """What a batch of notifications adds, and whether a ConditionRefresh must be called now."""
        deliveries: list[Delivery] = []
        anomalies: list[Anomaly] = []
        refresh_now = False
        for ev in events:
            if ev.kind == "refresh_start":
                self.in_refresh, self.refreshed = True, set()
            elif ev.kind == "refresh_end":
                anomalies += self._refresh_end(at)
            elif ev.kind == "refresh_required":
                self._gap_due(at, "RefreshRequired")
                refresh_now = True
            elif ev.kind == "condition":
                deliveries.append(self._condition(ev, at, receiver))
            self.last_event_at = at  # after: a RefreshRequired's gap starts before it
        return Observations(tuple(deliveries), (), tuple(anomalies)), refresh_now

    def refresh_failed(self, at: str, reason: str) -> Observations:
        """The ConditionRefresh call was refused: the gap ends now, nothing was re-sent."""
        self.in_refresh = False
        gap = self._gap(at, refused=reason)
        return Observations(anomalies=(gap,) if gap else ())

    # --- steps -----------------------------------------------------------------------------

    def _condition(self, ev: AlarmEvent, at: str, receiver: str) -> Delivery:
        channel = channel_name(self.template, ev)
        via = REFRESH if self.in_refresh else LIVE
        if self.in_refresh:
            self.refreshed.add(channel)
        self._remember(channel, ev, via)
        return alarm_delivery(self.device, channel, ev, self.generation, via=via, at=at, receiver=receiver)

    def _remember(self, channel: str, ev: AlarmEvent, via: str) -> None:
        """A refreshed (older) state never overwrites a newer live one."""
        old = self.seen.get(channel)
        older = old is not None and old.time is not None and (ev.time is None or ev.time < old.time)
        if via == REFRESH and older and old is not None and old.generation == self.generation:
            return
        self.seen[channel] = _Seen(ev.time, ev.active, ev.event_id, self.generation)

    def _refresh_end(self, at: str) -> list[Anomaly]:
        out: list[Anomaly] = []
        if self.in_refresh:
            for channel, s in sorted(self.seen.items()):
                if s.active and channel not in self.refreshed and s.generation is not None:
                    out.append(self._absent(channel, s, at))
                    del self.seen[channel]  # its state is unknown now; said once, not at every refresh
        self.in_refresh = False
        gap = self._gap(at)
        return ([gap] if gap else []) + out

    def _absent(self, channel: str, s: _Seen, at: str) -> Anomaly:
        assert s.generation is not None
        return Anomaly(
            f"{self.device}/{channel}",
            s.generation,
            ABSENT_AT_REFRESH,
            s.event_id or "",
            at,
            at,
            {
                "summary": "last seen active, not re-sent by the refresh: its state is unknown "
                "(no clear invented)",
                "last_time": s.time,
                "generation_now": self.generation,
            },
        )

    def _gap_due(self, at: str, reason: str) -> None:
        if self.gap_from is None:
            self.gap_from = self.last_event_at or self.connected_at or at
            self.gap_reason = reason

    def _gap(self, at: str, *, refused: str | None = None) -> Anomaly | None:
        """The gap record due since a reconnect or RefreshRequired, ending ``at`` (the end of the
        refresh, or the refusal of the ConditionRefresh call: then ``refused`` says why)."""
        if self.gap_from is None or self.generation is None:
            self.gap_from = None
            return None
        start, self.gap_from = self.gap_from, None
        evidence = {
            "reason": self.gap_reason,
            "summary": "alarm events in this time could not be seen; a refresh re-sends only the "
            "last event of retained conditions",
        }
        if refused is not None:
            evidence["refresh_refused"] = refused
        return Anomaly(f"{self.device}/{self.channel}", self.generation, "gap", start, at, at, evidence)

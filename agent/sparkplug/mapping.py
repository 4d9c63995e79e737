"""Records as Sparkplug metrics, and the births (pure; spec sparkplug.md sections 3 and 4).

One outbox row is one DDATA (so one metric never appears twice with one timestamp in a
payload). Every metric timestamp is the record's source time (the PLC clock); a record
without one (the contract makes `sourceTimestamp` optional) carries the time the record
itself has (first arrival, detection) and says so with the property `sourceTimestamp`
`is_null`: nothing is invented.

| record              | metrics                                                        |
|---------------------|----------------------------------------------------------------|
| transition          | `<channel>/State` (declared channels) and `Events/Transition`  |
| boot_observed       | `Events/BootObserved` and `Device Info/Boot Id`                |
| gap                 | `Events/Gap`                                                   |
| wrap/reset/overrun  | `Events/Anomaly`                                               |
| identity_incomplete | `Events/IdentityIncomplete` (`bootId` property `is_null` if unknown) |

An event metric's value is the record's canonical text (RFC 8785), as `agent.core.record_event`
writes it for every upstream: the CloudEvent of the contract without the fields of one delivery
(`attempt`, `replayed`, `gateway`, `outboxid`, `arrivalat`, `specversion`, `datacontenttype`).
Its PropertySet: `canonicalId` (the CloudEvent `id`),
`source` (the CloudEvent `source`), `transitionId`, `bootId`, `identityBasis` (each String or
`is_null`) and `windowKey` (Boolean, only on a window key).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from agent.core.basis import IdentityBasis
from agent.core.cloudevent_ids import pct
from agent.core.contract import channel_of, device_of
from agent.core.record_event import record_event, record_text, transition_event
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Transition
from agent.sparkplug.payload import DataType, Metric, Property

REBIRTH = "Node Control/Rebirth"
BD_SEQ = "bdSeq"
VERSION = "Properties/Version"
CONFIG_HASH = "Properties/Config Hash"
BOOT_ID = "Device Info/Boot Id"
EV_TRANSITION = "Events/Transition"
EV_BOOT = "Events/BootObserved"
EV_GAP = "Events/Gap"
EV_ANOMALY = "Events/Anomaly"
EV_INCOMPLETE = "Events/IdentityIncomplete"
EVENT_METRICS = (EV_TRANSITION, EV_BOOT, EV_GAP, EV_ANOMALY, EV_INCOMPLETE)
STATE_SUFFIX = "/State"


def to_ms(text: str) -> int:
    """Milliseconds since the epoch of a contract timestamp (RFC 3339 UTC, ms)."""
    return int(datetime.fromisoformat(text).timestamp() * 1000 + 0.5) if text else 0


def device_id(device: str) -> str:
    """The Sparkplug device id of a device name (percent-encoded: `+ / #` never reach a topic)."""
    return pct(device) if device else "-"


@dataclass(frozen=True, slots=True)
class DeviceLive:
    """What a DBIRTH declares for one device: its channels' current states and its boot id,
    from the store (value None: `is_null`; time None: the birth's own time)."""

    device: str
    states: tuple[tuple[str, str | None, str | None], ...]  # (channel, label, source time)
    boot_id: str | None
    boot_at: str | None


@dataclass(frozen=True, slots=True)
class RowMetrics:
    """The DDATA (or, for a record of no device, NDATA) of one outbox row."""

    outbox_id: int
    device: str | None  # None: a node-level message (NDATA)
    metrics: list[Metric]
    event_ms: int  # the event metric's timestamp (for the is_historical rule)


def node_birth(bd_seq: int, version: str, config_hash: str, now_ms: int) -> list[Metric]:
    """NBIRTH's metrics: bdSeq, the rebirth control (Boolean false), version, config hash,
    and the node-level identity-incomplete events (records of no configured device)."""
    return [
        Metric(BD_SEQ, DataType.INT64, bd_seq, now_ms),
        Metric(REBIRTH, DataType.BOOLEAN, False, now_ms),
        Metric(VERSION, DataType.STRING, version, now_ms),
        Metric(CONFIG_HASH, DataType.STRING, config_hash, now_ms),
        Metric(EV_INCOMPLETE, DataType.STRING, None, now_ms),
    ]


def node_death(bd_seq: int, now_ms: int) -> list[Metric]:
    return [Metric(BD_SEQ, DataType.INT64, bd_seq, now_ms)]


def device_birth(live: DeviceLive, now_ms: int) -> list[Metric]:
    """Every metric the device will ever send, with its current value (or `is_null`)."""
    out = [
        Metric(f"{ch}{STATE_SUFFIX}", DataType.STRING, label, to_ms(at) if at else now_ms)
        for ch, label, at in live.states
    ]
    out.append(
        Metric(BOOT_ID, DataType.STRING, live.boot_id, to_ms(live.boot_at) if live.boot_at else now_ms)
    )
    out += [Metric(name, DataType.STRING, None, now_ms) for name in EVENT_METRICS]
    return out


def _props(
    ce_id: str, ce_source: str, tid: str | None, boot: str | None, basis: str | None, ts: str | None
) -> tuple[Property, ...]:
    s = DataType.STRING
    out: tuple[Property, ...] = (
        Property("canonicalId", s, ce_id),
        Property("source", s, ce_source),
        Property("transitionId", s, tid),
        Property("bootId", s, boot),
        Property("identityBasis", s, basis),
    )
    if ts is None:
        out += (Property("sourceTimestamp", s, None),)
    if basis == IdentityBasis.WINDOW:
        out += (Property("windowKey", DataType.BOOLEAN, True),)
    return out


def row_metrics(
    entry: Entry, *, site: str, historical: bool, declared: frozenset[str], gateway: str, store_id: str
) -> RowMetrics:
    """The metrics of one claimed outbox row. `declared`: the `<channel>/State` metric names
    its device's birth declared (a state of another channel goes only as the event); `gateway`
    and `store_id` name an identity-incomplete record (its source and id). Raises ValueError
    (a ContractError among them) for a row with no record to send."""
    rec = entry.record
    if isinstance(rec, Transition):
        return _transition_metrics(entry.outbox_id, rec, site, historical, declared)
    if rec is None:
        raise ValueError(f"outbox row {entry.outbox_id}: its {entry.kind} record is gone")
    ev = record_event(rec, site, gateway, store_id)
    text, s = record_text(ev), DataType.STRING
    if isinstance(rec, BootObserved):
        ms = to_ms(rec.source_ts or rec.first_arrival)
        props = _props(ev.id, ev.source, None, rec.boot_id, None, rec.source_ts)
        metrics = [
            Metric(EV_BOOT, s, text, ms, historical, props, with_type=False),
            Metric(BOOT_ID, s, rec.boot_id, ms, historical, with_type=False),
        ]
        return RowMetrics(entry.outbox_id, rec.device, metrics, ms)
    if isinstance(rec, ChannelAnomaly):
        ms = to_ms(rec.detected_at)
        name = EV_GAP if rec.kind == "gap" else EV_ANOMALY
        props = _props(ev.id, ev.source, None, rec.boot_id, None, rec.detected_at)
        metric = Metric(name, s, text, ms, historical, props, with_type=False)
        return RowMetrics(entry.outbox_id, device_of(rec.source), [metric], ms)
    if not isinstance(rec, IdentityIncomplete):
        raise ValueError(f"outbox row {entry.outbox_id}: a {entry.kind} record has no metric")
    ms = to_ms(rec.source_ts or rec.arrival_at)
    props = _props(ev.id, ev.source, rec.transition_id, rec.boot_id, rec.basis, rec.source_ts)
    device = device_of(rec.source) if rec.source else None
    metric = Metric(EV_INCOMPLETE, s, text, ms, historical, props, with_type=False)
    return RowMetrics(entry.outbox_id, device, [metric], ms)


def _transition_metrics(
    outbox_id: int, rec: Transition, site: str, historical: bool, declared: frozenset[str]
) -> RowMetrics:
    """A transition's event metric, after its channel's `/State` where its device's birth declared it."""
    s = DataType.STRING
    ev = transition_event(rec, site)
    ms = to_ms(rec.source_ts or rec.first_arrival)
    props = _props(ev.id, ev.source, rec.transition_id, rec.boot_id, rec.basis, rec.source_ts)
    metrics = []
    channel = channel_of(rec.source)
    state_name = f"{channel}{STATE_SUFFIX}"
    if channel is not None and state_name in declared:
        label = state_label(rec.payload_json)
        if label is not None:
            metrics.append(Metric(state_name, s, label, ms, historical, with_type=False))
    metrics.append(Metric(EV_TRANSITION, s, record_text(ev), ms, historical, props, with_type=False))
    return RowMetrics(outbox_id, device_of(rec.source), metrics, ms)


def state_label(payload_json: str) -> str | None:
    """The state's label of a poller's payload (`{"state": ...}`), None when it has none."""
    try:
        payload = orjson.loads(payload_json)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or "state" not in payload:
        return None
    v = payload["state"]
    return v if isinstance(v, str) else json.dumps(v)


def config_hash(parts: Sequence[str]) -> str:
    """A short, stable hash of what the births declare (devices and channels)."""
    import hashlib

    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

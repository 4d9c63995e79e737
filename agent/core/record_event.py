"""A record's event, written once (pure; contract section 4, sparkplug.md section 3).

`record_event()` is what every upstream says of one record: its CloudEvents `source`, `id` and
`type`, its device and channel, its time, its extension attributes and its `data`;
`record_text()` is the record as canonical JSON (RFC 8785), the Sparkplug event metric's value.
`agent.sinks.encode` adds only the envelope of one delivery (`attempt`, `replayed`, `gateway`,
`outboxid`; its row fast path writes the common transition's same bytes from the stored row, held
equal by the tests); `agent.sparkplug.mapping` takes the text as it is. `arrivalat` is evidence,
not identity: it goes in the CloudEvent, never in the text.

| record              | type (io.edgeagent.*) | source                     | id                            |
|---------------------|-----------------------|----------------------------|-------------------------------|
| transition          | transition            | site/pct(device)/pct(chan) | pct(bootId):pct(transitionId) |
| boot_observed       | boot_observed         | site/pct(device)           | pct(bootId)                   |
| gap                 | gap                   | the channel's source       | gap:pct(boot):pct(a):pct(b)   |
| wrap/reset/overrun  | anomaly               | the channel's source       | <kind>:pct(boot):pct(a):pct(b)|
| identity_incomplete | identity_incomplete   | site/pct(gateway)          | store id:arrival id           |

(a, b: first and last missing value of a gap or overrun; old and new value of a wrap or reset.
The store id: arrival ids start again at 1 in a replaced store.) `identitybasis` (`counter`,
`event_id`, `window`) says where a transitionId came from; `window` is the `window_key` flag.

A transition's stored payload is canonical JSON already and is spliced in as it is; a stored
evidence text is not (the tracker writes it ASCII-escaped), so the text parses it once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, NamedTuple

from agent.core import cloudevent_ids as ids
from agent.core.contract import ContractError, Key, channel_of, device_of
from agent.core.jcs import canonical_json, json_string
from agent.core.records import BootObserved, ChannelAnomaly, IdentityIncomplete, Record, Transition

NO_CHANNEL = "-"
EVIDENCE_EXTENSIONS = frozenset({"arrivalat"})  # in the CloudEvent, never in the record's text

# The CloudEvent's JSON writer (its `data` of the records that are not transitions, and
# `agent.sinks.encode`'s strings): UTF-8 as it is, no spaces.
EVENT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class RecordEvent(NamedTuple):
    """One record's event without a delivery. `ext`: its extension attributes in the event's
    order; `data_json`: the CloudEvent's `data`; `data`: its values and `evidence_json` its
    stored evidence, for `record_text` (both None where `data_json` is canonical already: a
    transition's payload). The canonical data is made only when the text is asked for."""

    source: str
    id: str
    type: str
    device: str
    channel: str
    time: str | None
    ext: dict[str, str]
    data_json: str
    data: dict[str, Any] | None = None
    evidence_json: str | None = None


@lru_cache(maxsize=4096)
def source_of(site: str, source: str) -> str:
    """`cloudevent_ids.ce_source`, kept per (site, source): a gateway has a few hundred sources,
    and percent-encoding each one per event cost about 30 % of encoding one."""
    return ids.ce_source(site, source)


def record_event(rec: Record, site: str, gateway: str, store_id: str) -> RecordEvent:
    """The event of one record; ContractError when it has none (a site outside the contract, an
    identity-incomplete record of a store without a store id)."""
    if isinstance(rec, Transition):
        return transition_event(rec, site)
    if isinstance(rec, BootObserved):
        return _boot(rec, site)
    if isinstance(rec, ChannelAnomaly):
        return _anomaly(rec, site)
    return _incomplete(rec, site, gateway, store_id)


def transition_event(r: Transition, site: str) -> RecordEvent:
    ext = {"bootid": r.boot_id, "transitionid": r.transition_id, "arrivalat": r.first_arrival}
    ext["identitybasis"] = r.basis
    return RecordEvent(
        source_of(site, r.source),
        ids.ce_transition_id(Key(r.source, r.transition_id, r.boot_id)),
        ids.TRANSITION_TYPE,
        device_of(r.source),
        channel_of(r.source) or NO_CHANNEL,
        r.source_ts,
        ext,
        r.payload_json,
    )


def record_text(ev: RecordEvent) -> str:
    """The record as canonical JSON: the event's identity, its extension attributes but the
    evidence ones, and its data (keys in RFC 8785 order: the names are ASCII, so plain order)."""
    q, ext = json_string, ev.ext
    data = ev.data_json if ev.data is None else _canonical_data(ev.data, ev.evidence_json)
    boot, basis, tid = ext.get("bootid"), ext.get("identitybasis"), ext.get("transitionid")
    return (
        ("{" if boot is None else f'{{"bootid":{q(boot)},')
        + f'"data":{data},"id":{q(ev.id)},'
        + ("" if basis is None else f'"identitybasis":{q(basis)},')
        + f'"source":{q(ev.source)}'
        + ("" if ev.time is None else f',"time":{q(ev.time)}')
        + ("" if tid is None else f',"transitionid":{q(tid)}')
        + f',"type":{q(ev.type)}}}'
    )


def _boot(r: BootObserved, site: str) -> RecordEvent:
    data = {
        "device": r.device,
        "bootId": r.boot_id,
        "previousBootId": r.previous_boot_id,
        "firstArrival": r.first_arrival,
        "sourceTimestamp": r.source_ts,
        "live": r.live,
    }
    return RecordEvent(
        ids.ce_device_source(site, r.device),
        ids.pct(r.boot_id),
        ids.BOOT_OBSERVED_TYPE,
        r.device,
        NO_CHANNEL,
        r.source_ts,
        {"bootid": r.boot_id, "arrivalat": r.first_arrival},
        _with_evidence(data, r.evidence_json),
        data,
        r.evidence_json,
    )


def _anomaly(r: ChannelAnomaly, site: str) -> RecordEvent:
    data = {"kind": r.kind, "from": r.from_value, "to": r.to_value, "detectedAt": r.detected_at}
    return RecordEvent(
        source_of(site, r.source),
        ids.ce_anomaly_id(r.kind, r.boot_id, r.from_value, r.to_value),
        ids.GAP_TYPE if r.kind == "gap" else ids.ANOMALY_TYPE,
        device_of(r.source),
        channel_of(r.source) or NO_CHANNEL,
        r.detected_at,
        {"bootid": r.boot_id},
        _with_evidence(data, r.evidence_json),
        data,
        r.evidence_json,
    )


def _incomplete(r: IdentityIncomplete, site: str, gateway: str, store_id: str) -> RecordEvent:
    if not store_id:
        raise ContractError(f"arrival {r.arrival_id}: the store has no store id, so its record has no id")
    data = {
        "source": r.source,
        "transitionId": r.transition_id,
        "bootId": r.boot_id,
        "sourceTimestamp": r.source_ts,
        "arrivalAt": r.arrival_at,
        "receiver": r.receiver,
        "raw": r.raw,
    }
    return RecordEvent(
        ids.ce_device_source(site, gateway),
        f"{store_id}:{r.arrival_id}",
        ids.IDENTITY_INCOMPLETE_TYPE,
        device_of(r.source) if r.source else NO_CHANNEL,
        (channel_of(r.source) if r.source else None) or NO_CHANNEL,
        r.source_ts,
        {"arrivalat": r.arrival_at, "identitybasis": r.basis},
        EVENT_JSON.encode(data),
        data,
    )


def _with_evidence(data: dict[str, Any], evidence_json: str) -> str:
    """The CloudEvent's data: the stored evidence spliced in as it is."""
    text = EVENT_JSON.encode(data)
    return f'{text[:-1]},"evidence":{evidence_json or "{}"}}}'


def _canonical_data(data: dict[str, Any], evidence_json: str | None) -> str:
    """The data as RFC 8785, its evidence (not canonical as stored) parsed once."""
    if evidence_json is None:
        return canonical_json(data)
    return canonical_json({**data, "evidence": json.loads(evidence_json or "{}")})

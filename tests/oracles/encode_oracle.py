"""Reference writers of a record's event, the slow and obvious way, for the tests to hold the
product's writers equal to (tests/sinks/test_encode.py, tests/sinks/test_record_event.py):

* `body_general`: the structured-mode envelope through the JSON encoder over a dict (the fast
  `agent.sinks.encode._body` must write the same text);
* `cloudevent`: a record's whole CloudEvent from the contract's table (section 4), a dict per
  record kind through the JSON encoder, as `agent.sinks.encode` wrote it before issue 37;
* `record_text`: a record's canonical text the way the Sparkplug mapping made it before issue 37:
  its CloudEvent parsed back, the fields of one delivery popped, RFC 8785 over what is left.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core import cloudevent_ids as ids
from agent.core.contract import Key
from agent.core.jcs import canonical_json
from agent.core.record_event import RecordEvent
from agent.core.records import BootObserved, ChannelAnomaly, IdentityIncomplete, Record, Transition

SPECVERSION = "1.0"
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
DELIVERY_FIELDS = (
    "attempt",
    "replayed",
    "gateway",
    "outboxid",
    "arrivalat",
    "specversion",
    "datacontenttype",
)


def body_general(ev: RecordEvent, gateway: str, outbox: str, attempt: int, replayed: bool) -> str:
    head: dict[str, Any] = {"specversion": SPECVERSION, "id": ev.id, "source": ev.source, "type": ev.type}
    if ev.time is not None:
        head["time"] = ev.time
    head["datacontenttype"] = "application/json"
    head.update(ev.ext)
    head["gateway"] = gateway
    head["outboxid"] = outbox
    head["attempt"] = attempt
    head["replayed"] = replayed
    text = _JSON.encode(head)
    return f'{text[:-1]},"data":{ev.data_json}}}'


def _evidence(data: dict[str, Any], evidence_json: str) -> str:
    text = _JSON.encode(data)
    return f'{text[:-1]},"evidence":{evidence_json or "{}"}}}'


def _parts(rec: Record, site: str, gateway: str, store_id: str) -> tuple[dict[str, Any], str]:
    """(the CloudEvent's attributes before the envelope, its data text) of one record."""
    if isinstance(rec, Transition):
        source = ids.ce_source(site, rec.source)
        ce_id = ids.ce_transition_id(Key(rec.source, rec.transition_id, rec.boot_id))
        head = {"id": ce_id, "source": source, "type": ids.TRANSITION_TYPE, "time": rec.source_ts}
        ext = {"bootid": rec.boot_id, "transitionid": rec.transition_id, "arrivalat": rec.first_arrival}
        return {**head, "ext": {**ext, "identitybasis": rec.basis}}, rec.payload_json
    if isinstance(rec, BootObserved):
        head = {"id": ids.pct(rec.boot_id), "source": ids.ce_device_source(site, rec.device)}
        data = {
            "device": rec.device,
            "bootId": rec.boot_id,
            "previousBootId": rec.previous_boot_id,
            "firstArrival": rec.first_arrival,
            "sourceTimestamp": rec.source_ts,
            "live": rec.live,
        }
        ext = {"bootid": rec.boot_id, "arrivalat": rec.first_arrival}
        head |= {"type": ids.BOOT_OBSERVED_TYPE, "time": rec.source_ts, "ext": ext}
        return head, _evidence(data, rec.evidence_json)
    if isinstance(rec, ChannelAnomaly):
        head = {
            "id": ids.ce_anomaly_id(rec.kind, rec.boot_id, rec.from_value, rec.to_value),
            "source": ids.ce_source(site, rec.source),
            "type": ids.GAP_TYPE if rec.kind == "gap" else ids.ANOMALY_TYPE,
            "time": rec.detected_at,
            "ext": {"bootid": rec.boot_id},
        }
        data = {"kind": rec.kind, "from": rec.from_value, "to": rec.to_value, "detectedAt": rec.detected_at}
        return head, _evidence(data, rec.evidence_json)
    assert isinstance(rec, IdentityIncomplete)
    head = {
        "id": f"{store_id}:{rec.arrival_id}",
        "source": ids.ce_device_source(site, gateway),
        "type": ids.IDENTITY_INCOMPLETE_TYPE,
        "time": rec.source_ts,
        "ext": {"arrivalat": rec.arrival_at, "identitybasis": rec.basis},
    }
    data = {
        "source": rec.source,
        "transitionId": rec.transition_id,
        "bootId": rec.boot_id,
        "sourceTimestamp": rec.source_ts,
        "arrivalAt": rec.arrival_at,
        "receiver": rec.receiver,
        "raw": rec.raw,
    }
    return head, _JSON.encode(data)


def cloudevent(
    rec: Record, *, site: str, gateway: str, store_id: str, outbox_id: int, attempt: int, replayed: bool
) -> bytes:
    """The structured-mode CloudEvent of one record and delivery."""
    head, data = _parts(rec, site, gateway, store_id)
    ev: dict[str, Any] = {"specversion": SPECVERSION, "id": head["id"], "source": head["source"]}
    ev["type"] = head["type"]
    if head["time"] is not None:
        ev["time"] = head["time"]
    ev["datacontenttype"] = "application/json"
    ev.update(head["ext"])
    ev |= {
        "gateway": gateway,
        "outboxid": f"{store_id}:{outbox_id}",
        "attempt": attempt,
        "replayed": replayed,
    }
    return f'{_JSON.encode(ev)[:-1]},"data":{data}}}'.encode()


def record_text(cloudevent_body: bytes) -> str:
    """A record's canonical text from its CloudEvent: parsed, the delivery's fields popped."""
    ev = json.loads(cloudevent_body)
    for k in DELIVERY_FIELDS:
        ev.pop(k, None)
    return canonical_json(ev)

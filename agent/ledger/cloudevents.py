"""CloudEvents from gateways -> the ledger's arrivals (pure: no I/O, no database).

A body is `application/cloudevents-batch+json` (a JSON array of structured events) or one
structured event (`application/cloudevents+json`). A body that is not JSON, or not an array /
object, is refused whole (`BodyError`: HTTP 400, nothing stored). Inside a good body each event
is decided alone: a problem with one event makes it a `rejected` arrival with the reason (kept
raw, never merged), and the rest goes on.

A transition's key is (`source`, `transitionid`, `bootid`); its `id` must be what contract
section 4 makes of them, `time` is the source timestamp and `data` the payload, so the decision
is the gateway store's, by `agent.core.intake`. `gateway`, `arrivalat`, `attempt` and `replayed`
are evidence only.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core import cloudevent_ids, contract
from agent.core.contract import ContractError, Delivery, Key, Rejection
from agent.core.intake import delivery_from_object, parse_json_object
from agent.core.timestamps import normalize_timestamp
from agent.ledger.arrivals import Arrival, Received, RecordKind, Via

RECORD_KINDS: dict[str, RecordKind] = {
    cloudevent_ids.BOOT_OBSERVED_TYPE: "boot_observed",
    cloudevent_ids.GAP_TYPE: "gap",
    cloudevent_ids.ANOMALY_TYPE: "anomaly",
    cloudevent_ids.IDENTITY_INCOMPLETE_TYPE: "identity_incomplete",
}
UNKNOWN_GATEWAY = "unknown"


class BodyError(ValueError):
    """The whole body is unusable (not JSON, not an event or a list of events): nothing is stored."""


def parse_body(body: bytes, *, batch: bool, via: Via, now: str) -> list[Arrival]:
    """Every event of a body as an arrival, in order. Raises BodyError for an unusable body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"the body is not UTF-8 (byte {exc.start})") from exc
    if batch:
        try:
            # parse_json_object wants an object: wrap the array so its depth rule applies too.
            events = parse_json_object('{"e":' + text + "}")["e"]
        except ContractError as exc:
            raise BodyError(f"the body is not a JSON array of events: {exc}") from exc
        if not isinstance(events, list):
            raise BodyError("a batch (application/cloudevents-batch+json) must be a JSON array of events")
        return [from_event(ev, raw=_dump(ev), via=via, now=now) for ev in events]
    try:
        event = parse_json_object(text)
    except ContractError as exc:
        raise BodyError(f"the body is not a JSON object (one CloudEvent): {exc}") from exc
    return [from_event(event, raw=text, via=via, now=now)]


def _dump(ev: Any) -> str:
    return json.dumps(ev, ensure_ascii=False, separators=(",", ":"))


def from_event(ev: Any, *, raw: str | bytes, via: Via, now: str) -> Arrival:
    """One structured CloudEvent as an arrival; a broken one is a rejected arrival with the reason."""
    gateway = UNKNOWN_GATEWAY
    outbox = None
    if isinstance(ev, dict):
        if isinstance(ev.get("gateway"), str) and ev["gateway"]:
            gateway = ev["gateway"]
        if isinstance(ev.get("outboxid"), str):
            outbox = ev["outboxid"]
    try:
        if not isinstance(ev, dict):
            raise ContractError(f"an event must be a JSON object, not {type(ev).__name__}")
        attempt, replayed = _attempt(ev), _replayed(ev)
        ce_id = _event_head(ev)
        item = _item(ev, raw, now, via, gateway, ce_id)
    except ContractError as exc:
        return Arrival(Rejection(raw, str(exc), now, f"{via}:{gateway}"), gateway, via, outbox=outbox)
    return Arrival(item, gateway, via, attempt, replayed, ce_id, outbox=outbox)


def _event_head(ev: dict[str, Any]) -> str:
    for name in ("specversion", "id", "source", "type"):
        if not isinstance(ev.get(name), str) or not ev[name]:
            raise ContractError(f"not a CloudEvent: `{name}` is missing or not text")
    if ev["specversion"] != "1.0":
        raise ContractError(f"CloudEvents specversion {ev['specversion']!r} is not 1.0")
    if "data_base64" in ev:
        raise ContractError("data_base64 is not accepted: the payload must be a JSON object in `data`")
    return str(ev["id"])


def _attempt(ev: dict[str, Any]) -> int | None:
    v = ev.get("attempt")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ContractError(f"extension `attempt` must be a whole number >= 1, not {v!r}")
    return v


def _replayed(ev: dict[str, Any]) -> bool | None:
    v = ev.get("replayed")
    if v is None or isinstance(v, bool):
        return v
    raise ContractError(f"extension `replayed` must be true or false, not {v!r}")


def _item(
    ev: dict[str, Any], raw: str | bytes, now: str, via: Via, gateway: str, ce_id: str
) -> Delivery | Received:
    arrival_at = normalize_timestamp(ev.get("arrivalat"), "arrivalat") or now
    kind = RECORD_KINDS.get(ev["type"])
    if ev["type"] == cloudevent_ids.TRANSITION_TYPE:
        return _transition(ev, raw, arrival_at, f"{via}:{gateway}", ce_id)
    if kind is None:
        raise ContractError(f"unknown event type {ev['type']!r} (not an io.edgeagent record)")
    return _record(kind, ev, raw, arrival_at, ce_id)


def _transition(ev: dict[str, Any], raw: str | bytes, arrival_at: str, receiver: str, ce_id: str) -> Delivery:
    obj: dict[str, Any] = {
        "source": ev["source"],
        "transitionId": ev.get("transitionid"),
        "bootId": ev.get("bootid"),
        "sourceTimestamp": ev.get("time"),
        "arrivalAt": arrival_at,
    }
    if "data" in ev:
        obj["payload"] = ev["data"]
    d = delivery_from_object(obj, raw=raw, arrival_at=arrival_at, receiver=receiver)
    if d.key is not None:
        want = cloudevent_ids.ce_transition_id(Key(d.key.source, d.key.transition_id, d.key.boot_id))
        if ce_id != want:
            raise ContractError(
                f"id {ce_id!r} disagrees with its extensions bootid/transitionid (they make {want!r})"
            )
    return d


def _record(kind: RecordKind, ev: dict[str, Any], raw: str | bytes, arrival_at: str, ce_id: str) -> Received:
    data = ev.get("data", {})
    if not isinstance(data, dict):
        raise ContractError(f"`data` of a {kind} record must be a JSON object")
    boot_id = contract.normalize_id(ev.get("bootid"), "bootid")
    source_ts = normalize_timestamp(ev.get("time"), "time")
    fields: dict[str, Any] = {"evidence": data.get("evidence", {})}
    if kind == "boot_observed":
        if boot_id is None:
            raise ContractError("a boot_observed record needs its `bootid` extension")
        fields["previous_boot_id"] = contract.normalize_id(data.get("previousBootId"), "previousBootId")
        fields["live"] = data.get("live") is not False
    elif kind in ("gap", "anomaly"):
        if boot_id is None:
            raise ContractError(f"a {kind} record needs its `bootid` extension")
        what = data.get("kind")
        allowed = ("gap",) if kind == "gap" else ("wrap", "reset", "overrun")
        if what not in allowed:
            raise ContractError(f"a {kind} record's data.kind must be one of {', '.join(allowed)}")
        fields["kind"] = what
        fields["from"] = contract.normalize_id(data.get("from"), "from") or ""
        fields["to"] = contract.normalize_id(data.get("to"), "to") or ""
        fields["detected_at"] = (
            normalize_timestamp(data.get("detectedAt"), "detectedAt") or source_ts or arrival_at
        )
    return Received(kind, ev["source"], ce_id, boot_id, source_ts, arrival_at, raw, None, fields)

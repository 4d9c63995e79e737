"""Outbox records -> CloudEvents 1.0, structured JSON mode (pure; spec: contract section 4).
No I/O and no identity of its own: `source` and `id` come from the contract, unchanged.

Identity upstream is the pair (`source`, `id`), fixed by the contract and
never touched by anything of this delivery: `attempt`, `replayed`,
`gateway` and `arrivalat` are extension attributes, evidence only. So is
`identitybasis` (`counter`, `event_id` or `window`: where the transitionId came
from) on transitions and identity-incomplete records; `window` is the
`window_key` flag of contract section 8, so no receiver mistakes a window key
for an id the controller gave.

| record              | type (io.edgeagent.*) | source                     | id                            |
|---------------------|-----------------------|----------------------------|-------------------------------|
| transition          | transition            | site/pct(device)/pct(chan) | pct(bootId):pct(transitionId) |
| boot_observed       | boot_observed         | site/pct(device)           | pct(bootId)                   |
| gap                 | gap                   | the channel's source       | gap:pct(boot):pct(a):pct(b)   |
| wrap/reset/overrun  | anomaly               | the channel's source       | <kind>:pct(boot):pct(a):pct(b)|
| identity_incomplete | identity_incomplete   | site/pct(gateway)          | store id:arrival id           |

(a, b: first and last missing value for a gap or overrun; old and new value for a wrap or reset.
The store id is the UUID made with the store file: arrival ids start again at 1 in a replaced
store, so the arrival id alone could name two different records upstream.)

The stored JSON texts (payload, evidence) are canonical JSON already, so
they are spliced into the body as they are instead of parsed and re-dumped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from agent.core import cloudevent_ids, contract
from agent.core.basis import IdentityBasis
from agent.core.cloudevent_ids import pct
from agent.core.contract import Key, channel_of, device_of
from agent.core.records import (
    BootObserved,
    ChannelAnomaly,
    Entry,
    IdentityIncomplete,
    Transition,
    TransitionRow,
)

SPECVERSION = "1.0"
EVENT_CONTENT_TYPE = "application/cloudevents+json"
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
NO_CHANNEL = "-"


class EncodeError(ValueError):
    """The record cannot be expressed as a CloudEvent (e.g. a site outside the contract's alphabet)."""


class Event(NamedTuple):
    """One encoded CloudEvent, ready for any sink.

    `body` is the structured-mode JSON of the event; `device`/`channel`/`kind`
    feed the MQTT topic template. A named tuple: a backlog drain makes one per row (a frozen
    dataclass cost about 1 µs to build).
    """

    outbox_id: int
    ce_source: str
    ce_id: str
    ce_type: str
    kind: str
    device: str
    channel: str
    body: bytes

    @property
    def idempotency_key(self) -> str:
        return cloudevent_ids.idempotency_key(self.ce_source, self.ce_id)


@dataclass(frozen=True, slots=True)
class _Parts:
    source: str
    id: str
    type: str
    device: str
    channel: str
    time: str | None
    ext: dict[str, Any]
    data_json: str


def encode(entry: Entry, *, site: str, gateway: str, replayed: bool, store_id: str) -> Event:
    """The CloudEvent of one claimed outbox entry. Raises EncodeError when it has none.

    `store_id` is the UUID of the store the entry was claimed from (`Store.store_id`).
    """
    rec = entry.record
    if type(rec) is Transition:
        fast = _transition_fast(entry, rec, site, gateway, replayed, store_id)
        if fast is not None:
            return fast
    return encode_general(entry, site=site, gateway=gateway, replayed=replayed, store_id=store_id)


def encode_general(entry: Entry, *, site: str, gateway: str, replayed: bool, store_id: str) -> Event:
    """`encode()` without the transition's fast path: every record through its parts and `_body`
    (the same bytes; the reference the fast paths are tested against)."""
    rec = entry.record
    try:
        if isinstance(rec, Transition):
            parts = _transition(rec, site)
        elif isinstance(rec, BootObserved):
            parts = _boot(rec, site)
        elif isinstance(rec, ChannelAnomaly):
            parts = _anomaly(rec, site)
        elif isinstance(rec, IdentityIncomplete):
            parts = _incomplete(rec, site, gateway, store_id)
        else:
            raise EncodeError(f"outbox row {entry.outbox_id}: its {entry.kind} record {entry.ref_id} is gone")
    except contract.ContractError as exc:
        raise EncodeError(f"outbox row {entry.outbox_id}: {exc}") from exc
    body = _body(parts, gateway, outbox_ref(store_id, entry.outbox_id), entry.attempt, replayed).encode()
    return Event(
        entry.outbox_id, parts.source, parts.id, parts.type, entry.kind, parts.device, parts.channel, body
    )


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_PLAIN = re.compile('[^"\\\\\x00-\x1f\ud800-\udfff]*')  # text JSON writes between quotes as it is


def _q(text: str) -> str:
    """`text` as a JSON string, exactly as `_JSON` writes it."""
    return f'"{text}"' if _PLAIN.fullmatch(text) else _JSON.encode(text)


# Names, sources, types and the gateway repeat from event to event: quoted once each.
_q_repeated = lru_cache(maxsize=4096)(_q)


def outbox_ref(store_id: str, outbox_id: int) -> str:
    """The `outboxid` extension: the store's UUID and the outbox row's id. With `gateway` and
    `attempt` it names one delivery (ledger.md section 7: the ledger's arrival key), and it never
    repeats: a replaced store has a new UUID. Not part of the event's identity."""
    return f"{store_id}:{int(outbox_id)}"


def _body(parts: _Parts, gateway: str, outbox: str, attempt: int, replayed: bool) -> str:
    """The structured-mode event, written directly (the JSON encoder over a fresh dict per event
    was most of the cost of encoding; tests/oracles/encode_oracle.py writes it through the
    encoder, and the tests hold the two equal)."""
    q, qr = _q, _q_repeated
    ext = "".join(f",{qr(k)}:{q(v) if type(v) is str else _JSON.encode(v)}" for k, v in parts.ext.items())
    time = "" if parts.time is None else f',"time":{q(parts.time)}'
    return (
        f'{{"specversion":"{SPECVERSION}","id":{q(parts.id)},"source":{qr(parts.source)},'
        f'"type":{qr(parts.type)}{time},"datacontenttype":"application/json"{ext},'
        f'"gateway":{qr(gateway)},"outboxid":{q(outbox)},"attempt":{int(attempt)},'
        f'"replayed":{"true" if replayed else "false"},'
        f'"data":{parts.data_json}}}'
    )


@lru_cache(maxsize=4096)
def _source_of(site: str, source: str) -> str:
    # A gateway has a few hundred sources at most; percent-encoding each one per event cost ~30 % of encode().
    return cloudevent_ids.ce_source(site, source)


def _transition_fast(
    entry: Entry, r: Transition, site: str, gateway: str, replayed: bool, store_id: str
) -> Event | None:
    """The common transition of an entry, written by the forwarder's row encoder over the entry's
    row (one writer of that text, not two); None where that encoder declines a row (a value that
    needs JSON escaping, a site outside the contract) and for what it does not take (a basis that
    is not text, an entry of another kind), so the general path writes (or refuses) it."""
    if entry.kind != "transition" or type(r.basis) is not str:
        return None
    row = (entry.outbox_id, None, entry.attempt - 1, entry.ref_id, *r[1:])
    return _row_encoder(site, gateway, store_id)(row, replayed)


@lru_cache(maxsize=64)
def _row_encoder(site: str, gateway: str, store_id: str) -> Callable[[TransitionRow, bool], Event | None]:
    return transition_row_encoder(site, gateway, store_id)


_COUNTER = IdentityBasis.COUNTER.value
_TRANSITION_HEAD_MAX = 4096  # per-source parts kept by one row encoder (a gateway has a few hundred)


def transition_row_encoder(
    site: str, gateway: str, store_id: str
) -> Callable[[TransitionRow, bool], Event | None]:
    """`encode(row, replayed)`: the event of one stored transition straight from its claimed row
    (`agent.core.records.TransitionRow`, no Entry or Transition built for it), the same Event and
    bytes as `encode()` over the row's entry; None when the row is not in the common form (a value
    that needs JSON escaping, a site outside the contract), so the caller builds the entry and
    encodes it with `encode()`, which writes it or says why not. The row must be a transition
    whose record is there (its `source` not None).

    The parts that depend only on the source are kept per source (and this site and gateway)."""
    heads: dict[str, tuple[str, str, str, str] | None] = {}
    typ, kind = cloudevent_ids.TRANSITION_TYPE, "transition"
    # The body's fixed text: before the id; from the id's end to the source; after the basis.
    pre = f'{{"specversion":"{SPECVERSION}","id":"'
    mid = ',"datacontenttype":"application/json","bootid":"'
    gw = f',"gateway":{_q(gateway)},"outboxid":{_q(store_id + ":")[:-1]}'  # the row's id follows
    first = ('","attempt":1,"replayed":false,"data":', '","attempt":1,"replayed":true,"data":')
    new, unreserved = _new, _UNRESERVED.fullmatch

    def head(source: str) -> tuple[str, str, str, str] | None:
        try:
            ce_source = cloudevent_ids.ce_source(site, source)
        except contract.ContractError:
            return None
        if len(heads) >= _TRANSITION_HEAD_MAX:
            heads.clear()
        after_id = f'","source":{_q(ce_source)},"type":"{typ}"'
        got = heads[source] = (ce_source, device_of(source), channel_of(source) or NO_CHANNEL, after_id)
        return got

    def encode_row(r: TransitionRow, replayed: bool) -> Event | None:
        oid, _, attempts, _, source, tid, boot, ts, payload, arrival, basis = r
        if basis is None:
            basis = _COUNTER  # NULL in the head query
        if not (type(boot) is type(tid) is type(arrival) is type(basis) is str):
            return None
        if ts is None:
            plain = f"{boot}{tid}{arrival}{basis}"
        elif type(ts) is str:
            plain = f"{boot}{tid}{arrival}{basis}{ts}"
        else:
            return None
        # Every string that goes between quotes unescaped (JSON escapes only `"`, `\\` and U+0000
        # to U+001F, none of which is printable but the two tested); a concatenation is plain exactly
        # when each part is (the checks are per character).
        if not plain.isprintable() or '"' in plain or "\\" in plain:
            return None
        parts = heads.get(source)
        if parts is None:
            parts = head(source)
            if parts is None:
                return None
        ce_source, device, channel, after_id = parts
        both = f"{boot}{tid}"
        if (both.isascii() and both.isalnum()) or unreserved(both):
            ce_id = f"{boot}:{tid}"
        else:
            ce_id = f"{pct(boot)}:{pct(tid)}"
        tail = (
            f"{gw}{oid}{first[replayed]}"
            if attempts == 0
            else f'{gw}{oid}","attempt":{int(attempts) + 1},"replayed":{_JSON_BOOL[replayed]},"data":'
        )
        if ts is None:
            body = (
                f'{pre}{ce_id}{after_id}{mid}{boot}","transitionid":"{tid}","arrivalat":"{arrival}",'
                f'"identitybasis":"{basis}"{tail}{payload}}}'
            )
        else:
            body = (
                f'{pre}{ce_id}{after_id},"time":"{ts}"{mid}{boot}","transitionid":"{tid}","arrivalat":"{arrival}",'
                f'"identitybasis":"{basis}"{tail}{payload}}}'
            )
        return new(Event, (oid, ce_source, ce_id, typ, kind, device, channel, body.encode()))

    return encode_row


_JSON_BOOL = ("false", "true")
_new = tuple.__new__  # a named tuple from its values, without the per-call keyword handling
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")  # cloudevent_ids.pct leaves these as they are


def batch_body(events: list[Event]) -> bytes:
    """A JSON array of structured events (`application/cloudevents-batch+json`). One join over a
    list, the brackets put on the first and last bodies: a join over a generator and two
    concatenations of the whole array took about 9 times as long for a batch of 500."""
    if not events:
        return b"[]"
    bodies = [e.body for e in events]
    bodies[0] = b"[" + bodies[0]
    bodies[-1] = bodies[-1] + b"]"
    return b",".join(bodies)


def render_topic(template: str, site: str, event: Event) -> str:
    """The MQTT topic of an event; `{type}` is the record kind (e.g. `transition`)."""
    return template.format(site=site, device=pct(event.device), channel=pct(event.channel), type=event.kind)


def _transition(r: Transition, site: str) -> _Parts:
    key = Key(r.source, r.transition_id, r.boot_id)
    return _Parts(
        source=_source_of(site, r.source),
        id=cloudevent_ids.ce_transition_id(key),
        type=cloudevent_ids.TRANSITION_TYPE,
        device=device_of(r.source),
        channel=channel_of(r.source) or NO_CHANNEL,
        time=r.source_ts,
        ext=_with_basis(
            {"bootid": r.boot_id, "transitionid": r.transition_id, "arrivalat": r.first_arrival}, r.basis
        ),
        data_json=r.payload_json,
    )


def _boot(r: BootObserved, site: str) -> _Parts:
    data = {
        "device": r.device,
        "bootId": r.boot_id,
        "previousBootId": r.previous_boot_id,
        "firstArrival": r.first_arrival,
        "sourceTimestamp": r.source_ts,
        "live": r.live,
    }
    return _Parts(
        source=cloudevent_ids.ce_device_source(site, r.device),
        id=pct(r.boot_id),
        type=cloudevent_ids.BOOT_OBSERVED_TYPE,
        device=r.device,
        channel=NO_CHANNEL,
        time=r.source_ts,
        ext={"bootid": r.boot_id, "arrivalat": r.first_arrival},
        data_json=_with_evidence(data, r.evidence_json),
    )


def _anomaly(r: ChannelAnomaly, site: str) -> _Parts:
    data = {"kind": r.kind, "from": r.from_value, "to": r.to_value, "detectedAt": r.detected_at}
    return _Parts(
        source=_source_of(site, r.source),
        id=cloudevent_ids.ce_anomaly_id(r.kind, r.boot_id, r.from_value, r.to_value),
        type=cloudevent_ids.GAP_TYPE if r.kind == "gap" else cloudevent_ids.ANOMALY_TYPE,
        device=device_of(r.source),
        channel=channel_of(r.source) or NO_CHANNEL,
        time=r.detected_at,
        ext={"bootid": r.boot_id},
        data_json=_with_evidence(data, r.evidence_json),
    )


def _incomplete(r: IdentityIncomplete, site: str, gateway: str, store_id: str) -> _Parts:
    if not store_id:
        raise EncodeError(f"arrival {r.arrival_id}: the store has no store id, so its record has no id")
    data = {
        "source": r.source,
        "transitionId": r.transition_id,
        "bootId": r.boot_id,
        "sourceTimestamp": r.source_ts,
        "arrivalAt": r.arrival_at,
        "receiver": r.receiver,
        "raw": r.raw,
    }
    return _Parts(
        source=cloudevent_ids.ce_device_source(site, gateway),
        id=f"{store_id}:{r.arrival_id}",
        type=cloudevent_ids.IDENTITY_INCOMPLETE_TYPE,
        device=device_of(r.source) if r.source else NO_CHANNEL,
        channel=(channel_of(r.source) if r.source else None) or NO_CHANNEL,
        time=r.source_ts,
        ext=_with_basis({"arrivalat": r.arrival_at}, r.basis),
        data_json=_JSON.encode(data),
    )


def _with_basis(ext: dict[str, Any], basis: str) -> dict[str, Any]:
    """The identity basis (`counter`, `event_id`, `window`) as the extension `identitybasis`; for a
    window key, `identitybasis: window` is the `window_key` flag upstream (contract section 8)."""
    ext["identitybasis"] = basis
    return ext


def _with_evidence(data: dict[str, Any], evidence_json: str) -> str:
    text = _JSON.encode(data)
    return f'{text[:-1]},"evidence":{evidence_json or "{}"}}}'

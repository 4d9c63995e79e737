"""Outbox records -> CloudEvents 1.0, structured JSON mode (pure; spec: contract section 4).

The record's part of the event (`source`, `id`, `type`, time, extension attributes, `data`) is
`agent.core.record_event`'s, unchanged; this module adds only the envelope of one delivery:
`gateway`, `outboxid`, `attempt` and `replayed`, evidence that never touches the identity
(`source`, `id`). The common transition has a fast path (`transition_row_encoder`: the event
straight from its claimed row), held byte-identical to the general writer by the tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from agent.core import cloudevent_ids, contract
from agent.core.basis import IdentityBasis
from agent.core.cloudevent_ids import pct
from agent.core.contract import channel_of, device_of
from agent.core.record_event import EVENT_JSON, NO_CHANNEL, RecordEvent, record_event
from agent.core.records import Entry, Transition, TransitionRow

SPECVERSION = "1.0"
EVENT_CONTENT_TYPE = "application/cloudevents+json"
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"


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
    """`encode()` without the transition's fast path: every record through `record_event` and
    `_body` (the same bytes; the reference the fast path is tested against)."""
    rec = entry.record
    if rec is None:
        raise EncodeError(f"outbox row {entry.outbox_id}: its {entry.kind} record {entry.ref_id} is gone")
    try:
        ev = record_event(rec, site, gateway, store_id)
    except contract.ContractError as exc:
        raise EncodeError(f"outbox row {entry.outbox_id}: {exc}") from exc
    body = _body(ev, gateway, outbox_ref(store_id, entry.outbox_id), entry.attempt, replayed).encode()
    return Event(entry.outbox_id, ev.source, ev.id, ev.type, entry.kind, ev.device, ev.channel, body)


_JSON = EVENT_JSON
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


def _body(ev: RecordEvent, gateway: str, outbox: str, attempt: int, replayed: bool) -> str:
    """The structured-mode event, written directly (the JSON encoder over a fresh dict per event
    was most of the cost of encoding; tests/oracles/encode_oracle.py writes it through the
    encoder, and the tests hold the two equal)."""
    q, qr = _q, _q_repeated
    ext = "".join(f",{qr(k)}:{q(v) if type(v) is str else _JSON.encode(v)}" for k, v in ev.ext.items())
    time = "" if ev.time is None else f',"time":{q(ev.time)}'
    return (
        f'{{"specversion":"{SPECVERSION}","id":{q(ev.id)},"source":{qr(ev.source)},'
        f'"type":{qr(ev.type)}{time},"datacontenttype":"application/json"{ext},'
        f'"gateway":{qr(gateway)},"outboxid":{q(outbox)},"attempt":{int(attempt)},'
        f'"replayed":{"true" if replayed else "false"},'
        f'"data":{ev.data_json}}}'
    )


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
    whose record is there (its `source` not None)."""
    gw = f',"gateway":{_q(gateway)},"outboxid":{_q(store_id + ":")[:-1]}'  # the row's id follows
    return _row_writer(_source_heads(site), gw)


_Head = tuple[str, str, str, str]  # (CloudEvents source, device, channel, the body from the id's end)


def _source_heads(site: str) -> tuple[dict[str, _Head | None], Callable[[str], _Head | None]]:
    """(the parts kept, `head(source)`): the parts of a transition's event that depend only on its
    source (and this site), made and kept by `head`; None for a source of no CloudEvents source (a
    site outside the contract)."""
    heads: dict[str, _Head | None] = {}
    typ = cloudevent_ids.TRANSITION_TYPE

    def head(source: str) -> _Head | None:
        try:
            ce_source = cloudevent_ids.ce_source(site, source)
        except contract.ContractError:
            return None
        if len(heads) >= _TRANSITION_HEAD_MAX:
            heads.clear()
        after_id = f'","source":{_q(ce_source)},"type":"{typ}"'
        got = heads[source] = (ce_source, device_of(source), channel_of(source) or NO_CHANNEL, after_id)
        return got

    return heads, head


def _row_writer(
    kept: tuple[dict[str, _Head | None], Callable[[str], _Head | None]], gw: str
) -> Callable[[TransitionRow, bool], Event | None]:
    """The row encoder of `transition_row_encoder` over its sources' parts and the gateway's text."""
    heads, head = kept
    typ, kind = cloudevent_ids.TRANSITION_TYPE, "transition"
    # The body's fixed text: before the id; from the id's end to the source; after the basis.
    pre = f'{{"specversion":"{SPECVERSION}","id":"'
    mid = ',"datacontenttype":"application/json","bootid":"'
    first = ('","attempt":1,"replayed":false,"data":', '","attempt":1,"replayed":true,"data":')
    new, unreserved = _new, _UNRESERVED.fullmatch

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
        # Every string goes between quotes unescaped (JSON escapes only `"`, `\\` and U+0000 to
        # U+001F, none printable but the two tested); a concatenation is plain when each part is.
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

"""CloudEvents mapping table (contract section 4): ids, sources, types, extensions."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from encode_oracle import body_general
from hypothesis import given
from hypothesis import strategies as st

from agent.core.contract import ContractError
from agent.core.record_event import RecordEvent, transition_event
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Record, Transition
from agent.sinks import encode as encode_module
from agent.sinks.encode import EncodeError, Event, batch_body, encode, render_topic

SITE = "plant-1"
GW = "gw-line3"
STORE_ID = "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f"


def tr(
    source: str = "PUMP-07/Trip",
    tid: str = "T91",
    boot: str = "B17",
    ts: str | None = "2026-04-22T08:00:12.120Z",
    payload: str = '{"severity":"High"}',
) -> Transition:
    return Transition(1, source, tid, boot, ts, payload, "2026-04-22T08:00:12.180Z")


def entry(rec: Record | None, attempt: int = 1, kind: str = "transition") -> Entry:
    return Entry(outbox_id=5, kind=kind, ref_id=1, attempt=attempt, record=rec)


def ce(rec: Record, *, attempt: int = 1, replayed: bool = False, kind: str = "transition") -> dict[str, Any]:
    ev = encode(entry(rec, attempt, kind), site=SITE, gateway=GW, replayed=replayed, store_id=STORE_ID)
    doc = json.loads(ev.body)
    assert (doc["source"], doc["id"], doc["type"]) == (ev.ce_source, ev.ce_id, ev.ce_type)
    return doc  # type: ignore[no-any-return]


def test_a_transition_is_the_exact_structured_event_of_the_contract() -> None:
    assert ce(tr(), attempt=2, replayed=True) == {
        "specversion": "1.0",
        "id": "B17:T91",
        "source": "plant-1/PUMP-07/Trip",
        "type": "io.edgeagent.transition",
        "time": "2026-04-22T08:00:12.120Z",
        "datacontenttype": "application/json",
        "bootid": "B17",
        "transitionid": "T91",
        "arrivalat": "2026-04-22T08:00:12.180Z",
        "identitybasis": "counter",
        "gateway": "gw-line3",
        "outboxid": f"{STORE_ID}:5",
        "attempt": 2,
        "replayed": True,
        "data": {"severity": "High"},
    }


@pytest.mark.parametrize(
    ("basis", "tid"),
    [
        pytest.param("counter", "T91", id="an id the controller counted says counter"),
        pytest.param("event_id", "0a1b2c", id="an OPC UA EventId says event_id"),
        pytest.param("window", "w:Trip:29614080", id="a window key says window, the flag upstream"),
    ],
)
def test_every_transition_says_its_identity_basis_and_the_id_does_not_change(basis: str, tid: str) -> None:
    rec = Transition(1, "PUMP-07/Trip", tid, "B17", None, "{}", "2026-04-22T08:00:12.180Z", basis)
    doc = ce(rec)
    assert doc["identitybasis"] == basis
    assert doc["id"] == "B17:" + tid.replace(":", "%3A")  # the basis never enters the identity
    assert doc["source"] == "plant-1/PUMP-07/Trip"


def test_an_identity_incomplete_window_delivery_says_window_upstream() -> None:
    rec = IdentityIncomplete(
        3, "PUMP-07/Coil", "w:On:5", None, None, "2026-04-22T09:00:00.000Z", "r", "{}", "window"
    )
    assert ce(rec, kind="identity_incomplete")["identitybasis"] == "window"


@pytest.mark.parametrize(
    ("rec", "source", "ident"),
    [
        pytest.param(
            tr(tid="T:1", boot="B:2"),
            "plant-1/PUMP-07/Trip",
            "B%3A2:T%3A1",
            id="a colon inside a part is encoded so the id is unambiguous",
        ),
        pytest.param(
            tr(source="PUMP 07/Över Temp"),
            "plant-1/PUMP%2007/%C3%96ver%20Temp",
            "B17:T91",
            id="device and channel are percent-encoded as UTF-8 bytes",
        ),
        pytest.param(
            tr(source="PUMP/07/Trip"),
            "plant-1/PUMP/07%2FTrip",
            "B17:T91",
            id="a slash in the channel is encoded so PUMP/07 + Trip never meets PUMP + 07/Trip",
        ),
        pytest.param(tr(source="PUMP-07"), "plant-1/PUMP-07", "B17:T91", id="a source without channel"),
        pytest.param(
            tr(tid="a~b.c_d-e"),
            "plant-1/PUMP-07/Trip",
            "B17:a~b.c_d-e",
            id="the unreserved characters stay as they are",
        ),
    ],
)
def test_transition_source_and_id(rec: Transition, source: str, ident: str) -> None:
    doc = ce(rec)
    assert (doc["source"], doc["id"]) == (source, ident)


def test_identity_does_not_depend_on_attempt_replay_or_arrival() -> None:
    a = encode(entry(tr(), 1), site=SITE, gateway=GW, replayed=False, store_id=STORE_ID)
    b = encode(
        entry(Transition(9, "PUMP-07/Trip", "T91", "B17", None, "{}", "2030-01-01T00:00:00.000Z"), 7),
        site=SITE,
        gateway="other-gw",
        replayed=True,
        store_id="another-store",
    )
    assert (a.ce_source, a.ce_id, a.idempotency_key) == (b.ce_source, b.ce_id, b.idempotency_key)


def test_idempotency_key_is_sha256_of_source_newline_id() -> None:
    ev = encode(entry(tr()), site=SITE, gateway=GW, replayed=False, store_id=STORE_ID)
    assert ev.idempotency_key == hashlib.sha256(b"plant-1/PUMP-07/Trip\nB17:T91").hexdigest()


def test_time_is_left_out_when_the_source_gave_none() -> None:
    assert "time" not in ce(tr(ts=None))


@pytest.mark.parametrize(
    ("rec", "kind", "typ", "source", "ident"),
    [
        pytest.param(
            BootObserved(3, "PUMP-07", "B:18", "B17", "2026-04-22T09:00:00.000Z", None, True, '{"k":1}'),
            "boot_observed",
            "io.edgeagent.boot_observed",
            "plant-1/PUMP-07",
            "B%3A18",
            id="a boot observed is its device's event with the boot id as id",
        ),
        pytest.param(
            ChannelAnomaly(4, "PUMP-07/Trip", "B17", "gap", "92", "93", "2026-04-22T09:00:00.000Z", "{}"),
            "gap",
            "io.edgeagent.gap",
            "plant-1/PUMP-07/Trip",
            "gap:B17:92:93",
            id="a gap is the channel's event with the missing range in its id",
        ),
        pytest.param(
            ChannelAnomaly(5, "PUMP-07/Trip", "B17", "wrap", "65535", "1", "2026-04-22T09:00:00.000Z", "{}"),
            "anomaly",
            "io.edgeagent.anomaly",
            "plant-1/PUMP-07/Trip",
            "wrap:B17:65535:1",
            id="a wrap is an anomaly with old and new value in its id",
        ),
        pytest.param(
            ChannelAnomaly(6, "PUMP-07/Trip", "B17", "overrun", "10", "20", "2026-04-22T09:00:00.000Z", "{}"),
            "anomaly",
            "io.edgeagent.anomaly",
            "plant-1/PUMP-07/Trip",
            "overrun:B17:10:20",
            id="a ring overrun is an anomaly with the lost range in its id",
        ),
        pytest.param(
            IdentityIncomplete(77, "PUMP-07/Trip", "T5", None, None, "2026-04-22T09:00:00.000Z", "r", "{}"),
            "identity_incomplete",
            "io.edgeagent.identity_incomplete",
            "plant-1/gw-line3",
            "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f:77",
            id="an identity incomplete arrival is the gateway's event with store id and arrival id",
        ),
    ],
)
def test_other_records_have_their_own_types(
    rec: Record, kind: str, typ: str, source: str, ident: str
) -> None:
    doc = ce(rec, kind=kind)
    assert (doc["type"], doc["source"], doc["id"]) == (typ, source, ident)
    assert doc["type"] != "io.edgeagent.transition"
    assert doc["gateway"] == GW and doc["attempt"] == 1 and doc["replayed"] is False


def test_boot_observed_carries_its_evidence_and_predecessor() -> None:
    doc = ce(
        BootObserved(3, "PUMP-07", "B18", "B17", "t1", "t0", False, '{"register":100}'), kind="boot_observed"
    )
    assert doc["data"] == {
        "device": "PUMP-07",
        "bootId": "B18",
        "previousBootId": "B17",
        "firstArrival": "t1",
        "sourceTimestamp": "t0",
        "live": False,
        "evidence": {"register": 100},
    }
    assert doc["bootid"] == "B18"


def test_a_missing_record_cannot_be_encoded() -> None:
    with pytest.raises(EncodeError, match="gone"):
        encode(entry(None), site=SITE, gateway=GW, replayed=False, store_id=STORE_ID)


def test_a_site_outside_the_contract_alphabet_cannot_be_encoded() -> None:
    with pytest.raises(EncodeError):
        encode(entry(tr()), site="plant 1", gateway=GW, replayed=False, store_id=STORE_ID)


def _ev(source: str, kind: str = "transition") -> Event:
    rec = tr(source=source)
    return encode(entry(rec, kind=kind), site=SITE, gateway=GW, replayed=False, store_id=STORE_ID)


@pytest.mark.parametrize(
    ("template", "source", "topic"),
    [
        pytest.param(
            "{site}/events/{device}/{channel}",
            "PUMP-07/Trip",
            "plant-1/events/PUMP-07/Trip",
            id="the default template",
        ),
        pytest.param(
            "{site}/{type}/{device}",
            "PUMP-07/Trip",
            "plant-1/transition/PUMP-07",
            id="type is the record kind",
        ),
        pytest.param(
            "x/{device}/{channel}",
            "PUMP-07/a+b#c/d",
            "x/PUMP-07/a%2Bb%23c%2Fd",
            id="MQTT wildcards and slashes in a channel never reach the topic",
        ),
        pytest.param("x/{device}/{channel}", "PUMP-07", "x/PUMP-07/-", id="no channel renders as a dash"),
    ],
)
def test_topic_rendering(template: str, source: str, topic: str) -> None:
    assert render_topic(template, SITE, _ev(source)) == topic


def test_a_batch_body_is_a_json_array_of_the_same_events() -> None:
    evs = [_ev("A/x"), _ev("B/y")]
    assert json.loads(batch_body(evs)) == [json.loads(e.body) for e in evs]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 500])
def test_a_batch_body_is_the_event_bodies_joined_by_commas_in_brackets(n: int) -> None:
    # The bytes exactly (a receiver may hash the body): no space, no newline, in order.
    evs = [_ev(f"D{i}/x") for i in range(n)]
    assert batch_body(evs) == b"[" + b",".join(e.body for e in evs) + b"]"


def _incomplete(arrival_id: int) -> Entry:
    rec = IdentityIncomplete(
        arrival_id, "PUMP-07/Trip", "T5", None, None, "2026-04-22T09:00:00.000Z", "r", "{}"
    )
    return entry(rec, kind="identity_incomplete")


def test_the_same_arrival_id_in_two_stores_is_two_ids_upstream() -> None:
    old = encode(_incomplete(1), site=SITE, gateway=GW, replayed=False, store_id=STORE_ID)
    new = encode(_incomplete(1), site=SITE, gateway=GW, replayed=False, store_id="a-new-store")
    assert old.ce_source == new.ce_source
    assert (old.ce_id, new.ce_id) == (f"{STORE_ID}:1", "a-new-store:1")
    assert old.idempotency_key != new.idempotency_key


def test_an_identity_incomplete_record_without_a_store_id_is_not_given_one() -> None:
    with pytest.raises(EncodeError, match="no store id"):
        encode(_incomplete(1), site=SITE, gateway=GW, replayed=False, store_id="")


@given(
    ident=st.text(),
    source=st.text(),
    kind=st.text(),
    time=st.none() | st.text(),
    ext=st.dictionaries(st.sampled_from(["bootid", "transitionid", "arrivalat"]), st.none() | st.text()),
    gateway=st.text(),
    attempt=st.integers(min_value=1, max_value=10**6),
    replayed=st.booleans(),
)
def test_the_direct_body_is_exactly_what_the_json_encoder_writes(
    ident: str,
    source: str,
    kind: str,
    time: str | None,
    ext: dict[str, str | None],
    gateway: str,
    attempt: int,
    replayed: bool,
) -> None:
    ev = RecordEvent(source, ident, kind, "dev", "chan", time, dict(ext), '{"a":1}')  # type: ignore[arg-type]
    direct = encode_module._body(ev, gateway, f"{STORE_ID}:7", attempt, replayed)
    assert direct == body_general(ev, gateway, f"{STORE_ID}:7", attempt, replayed)


def _general(e: Entry, site: str, gateway: str, replayed: bool) -> Event:
    rec = e.record
    assert isinstance(rec, Transition)
    ev = transition_event(rec, site)
    body = encode_module._body(ev, gateway, f"{STORE_ID}:{e.outbox_id}", e.attempt, replayed).encode()
    return Event(e.outbox_id, ev.source, ev.id, ev.type, e.kind, ev.device, ev.channel, body)


@given(
    source=st.sampled_from(["PUMP-07/Trip", "PUMP 07/Trip", "dev", "dev/", "a/b/c", "é/ü"]) | st.text(),
    tid=st.sampled_from(["T91", "42", "a:b"]) | st.text(),
    boot=st.sampled_from(["B17", "x y"]) | st.text(),
    ts=st.none() | st.sampled_from(["2026-04-22T08:00:12.120Z"]) | st.text(),
    arrival=st.sampled_from(["2026-04-22T08:00:12.180Z"]) | st.text(),
    basis=st.sampled_from(["counter", "event_id", "window"]) | st.text(),
    site=st.sampled_from([SITE, "bad site"]),
    gateway=st.sampled_from([GW, 'g"w']) | st.text(),
    attempt=st.integers(min_value=1, max_value=10**6),
    replayed=st.booleans(),
)
def test_the_transition_fast_path_writes_exactly_the_general_event(
    source: str,
    tid: str,
    boot: str,
    ts: str | None,
    arrival: str,
    basis: str,
    site: str,
    gateway: str,
    attempt: int,
    replayed: bool,
) -> None:
    rec = Transition(3, source, tid, boot, ts, '{"n":1}', arrival, basis)
    e = entry(rec, attempt)
    fast = encode_module._transition_fast(e, rec, site, gateway, replayed, STORE_ID)
    try:
        general = _general(e, site, gateway, replayed)
    except ContractError:  # the general path refuses it: so must the fast path
        assert fast is None
        return
    assert fast is None or fast == general
    assert encode(e, site=site, gateway=gateway, replayed=replayed, store_id=STORE_ID) == general


def test_the_common_transition_takes_the_fast_path() -> None:
    rec = tr()
    e = entry(rec)
    fast = encode_module._transition_fast(e, rec, SITE, GW, True, STORE_ID)
    assert fast is not None
    assert fast == _general(e, SITE, GW, True)

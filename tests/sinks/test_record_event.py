"""One writer of a record's event (issue 37): for the same record, every upstream says the same
id, source and identity fields, and the same text, byte for byte, as the reference writers of
tests/oracles/encode_oracle.py: the MQTT and HTTP CloudEvent (`encode`, its fast path included)
and the Sparkplug event metric (its value and its PropertySet)."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import encode_oracle as oracle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.contract import ContractError, channel_of, device_of
from agent.core.jcs import canonical_json
from agent.core.record_event import record_event, record_text
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Record, Transition
from agent.sinks.encode import EncodeError, encode
from agent.sparkplug import mapping
from agent.sparkplug.payload import Metric

GW = "gw-line3"
STORE_ID = "6f1c2b9e-3d4a-4c5b-9e8f-0a1b2c3d4e5f"
KINDS = {Transition: "transition", BootObserved: "boot_observed", IdentityIncomplete: "identity_incomplete"}

texts = (
    st.sampled_from(["PUMP-07", "Trip", "B17", "a:b", "x y", "é/ü", "2026-04-22T08:00:12.120Z"]) | st.text()
)
# Contract timestamps (RFC 3339 UTC, ms): the Sparkplug metric's timestamp is read from them.
stamps = st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat(timespec="milliseconds")[:-6] + "Z")
times = st.none() | stamps
bases = st.sampled_from(["counter", "event_id", "window"])
scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3)
)
# As the tracker writes evidence (core/snapshot.py): sorted keys, ASCII escapes; or none at all.
evidence = st.dictionaries(st.text(), json_values, max_size=4).map(
    lambda d: json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode(d)
) | st.just("")
payloads = st.dictionaries(st.text(), json_values, max_size=4).map(canonical_json)  # stored canonical

transitions = st.builds(
    Transition, st.integers(1, 10**6), texts, texts, texts, times, payloads, stamps, bases
)
boots = st.builds(
    BootObserved, st.integers(1), texts, texts, st.none() | texts, stamps, times, st.booleans(), evidence
)
anomalies = st.builds(
    ChannelAnomaly,
    st.integers(1),
    texts,
    texts,
    st.sampled_from(["gap", "wrap", "reset", "overrun"]),
    texts,
    texts,
    stamps,
    evidence,
)
incompletes = st.builds(
    IdentityIncomplete,
    st.integers(1),
    st.none() | texts,
    st.none() | texts,
    st.none() | texts,
    times,
    stamps,
    texts,
    texts,
    bases,
)
records = transitions | boots | anomalies | incompletes


def kind_of(rec: Record) -> str:
    if isinstance(rec, ChannelAnomaly):
        return "gap" if rec.kind == "gap" else "anomaly"
    return KINDS[type(rec)]


def event_metric(rm: mapping.RowMetrics) -> Metric:
    return next(m for m in rm.metrics if m.name in mapping.EVENT_METRICS)


def expected_props(rec: Record, ev: dict[str, Any]) -> dict[str, Any]:
    """The PropertySet sparkplug.md section 3 asks for, from the reference event."""
    tid = rec.transition_id if isinstance(rec, Transition | IdentityIncomplete) else None
    basis = rec.basis if isinstance(rec, Transition | IdentityIncomplete) else None
    props = {"canonicalId": ev["id"], "source": ev["source"], "transitionId": tid, "bootId": rec.boot_id}
    props["identityBasis"] = basis
    if "time" not in ev:
        props["sourceTimestamp"] = None
    if basis == "window":
        props["windowKey"] = True
    return props


@settings(max_examples=400)
@given(
    rec=records,
    site=st.sampled_from(["plant-1", "plant-1/line:3", "bad site"]),
    store_id=st.sampled_from([STORE_ID, ""]),
    attempt=st.integers(1, 10**6),
    replayed=st.booleans(),
)
def test_every_upstream_writes_the_reference_id_fields_and_text_of_a_record(
    rec: Record, site: str, store_id: str, attempt: int, replayed: bool
) -> None:
    entry = Entry(7, kind_of(rec), 1, attempt, rec)
    delivery = {"outbox_id": 7, "attempt": attempt, "replayed": replayed}
    try:
        reference = oracle.cloudevent(rec, site=site, gateway=GW, store_id=store_id, **delivery)
        if isinstance(rec, IdentityIncomplete) and not store_id:
            raise ContractError("no store id")
    except ContractError:  # no event: every upstream refuses it too
        with pytest.raises(EncodeError):
            encode(entry, site=site, gateway=GW, replayed=replayed, store_id=store_id)
        with pytest.raises(ValueError):
            mapping.row_metrics(
                entry, site=site, historical=False, declared=frozenset(), gateway=GW, store_id=store_id
            )
        return
    ref = json.loads(reference)

    got = encode(entry, site=site, gateway=GW, replayed=replayed, store_id=store_id)  # MQTT and HTTP
    assert got.body == reference
    assert (got.ce_id, got.ce_source, got.ce_type) == (ref["id"], ref["source"], ref["type"])
    if isinstance(rec, BootObserved):
        device, channel = rec.device, "-"  # a device's record: the whole name, no channel
    elif rec.source is None or (isinstance(rec, IdentityIncomplete) and not rec.source):
        device, channel = "-", "-"  # an arrival of no source
    else:
        device, channel = device_of(rec.source), channel_of(rec.source) or "-"
    assert (got.device, got.channel) == (device, channel)  # the MQTT topic's parts

    rm = mapping.row_metrics(
        entry, site=site, historical=False, declared=frozenset(), gateway=GW, store_id=store_id
    )
    metric = event_metric(rm)  # Sparkplug
    assert metric.value == oracle.record_text(reference)
    assert {p.key: p.value for p in metric.properties} == expected_props(rec, ref)
    assert record_text(record_event(rec, site, GW, store_id)) == metric.value


def test_the_text_leaves_out_every_field_of_one_delivery_and_the_arrival() -> None:
    t = Transition(
        1, "PUMP-07/Trip", "T91", "B17", None, '{"state":"Tripped"}', "2026-04-22T08:00:12.180Z", "window"
    )
    text = record_text(record_event(t, "plant-1", GW, STORE_ID))
    assert text == (
        '{"bootid":"B17","data":{"state":"Tripped"},"id":"B17:T91","identitybasis":"window",'
        '"source":"plant-1/PUMP-07/Trip","transitionid":"T91","type":"io.edgeagent.transition"}'
    )


def test_a_boot_s_text_holds_its_evidence_as_canonical_json_not_as_stored() -> None:
    b = BootObserved(
        1, "PUMP-07", "B18", "B17", "2026-04-22T08:00:12.180Z", None, True, '{"why":"\\u00e9","x":1.0}'
    )
    ev = record_event(b, "plant-1", GW, STORE_ID)
    assert ev.data_json.endswith(',"evidence":{"why":"\\u00e9","x":1.0}}')  # the CloudEvent: as stored
    assert json.loads(record_text(ev))["data"]["evidence"] == {"why": "é", "x": 1}
    assert '"evidence":{"why":"é","x":1}' in record_text(ev)

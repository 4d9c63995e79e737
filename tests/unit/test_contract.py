"""Ids, timestamps and the CloudEvents encoding of the identity contract."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core import decide
from agent.core.cloudevent_ids import (
    ce_anomaly_id,
    ce_device_source,
    ce_source,
    ce_transition_id,
    idempotency_key,
    pct,
)
from agent.core.contract import (
    ContractError,
    Decision,
    Delivery,
    Key,
    imported_delivery,
    normalize_id,
    payload_hash,
    polled_delivery,
)
from agent.core.timestamps import normalize_timestamp


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(91, "91", id="an integer is its decimal text"),
        pytest.param("91", "91", id="text stays text"),
        pytest.param("091", "091", id="leading zeros are kept"),
        pytest.param(" T1", " T1", id="whitespace is kept: it is part of what the source sent"),
        pytest.param(-3, "-3", id="negative integers"),
        pytest.param(2**70, str(2**70), id="big integers exactly"),
        pytest.param("", None, id="empty text is missing"),
        pytest.param(None, None, id="null is missing"),
    ],
)
def test_id_text_rule(value: Any, text: str | None) -> None:
    assert normalize_id(value, "bootId") == text


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(True, id="a boolean"),
        pytest.param(91.0, id="a number with a fraction part"),
        pytest.param({"id": 1}, id="an object"),
        pytest.param([1], id="a list"),
        pytest.param("T\ud800", id="text with a lone surrogate"),
    ],
)
def test_ids_that_are_neither_text_nor_integer_are_refused(value: Any) -> None:
    with pytest.raises(ContractError):
        normalize_id(value, "transitionId")


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        pytest.param("2026-04-22T08:00:12.120Z", "2026-04-22T08:00:12.120Z", id="UTC with millis"),
        pytest.param("2026-04-22T08:00:12Z", "2026-04-22T08:00:12.000Z", id="no fraction gets .000"),
        pytest.param("2026-04-22T08:00:12.1Z", "2026-04-22T08:00:12.100Z", id="one digit of fraction"),
        pytest.param(
            "2026-04-22T08:00:12.123999999Z", "2026-04-22T08:00:12.123Z", id="nanoseconds truncated"
        ),
        pytest.param(
            "2026-04-22T10:00:12.120+02:00", "2026-04-22T08:00:12.120Z", id="offset converted to UTC"
        ),
        pytest.param("2026-04-22T00:30:00-05:30", "2026-04-22T06:00:00.000Z", id="negative half-hour offset"),
        pytest.param("2026-04-22t08:00:12z", "2026-04-22T08:00:12.000Z", id="lowercase t and z"),
        pytest.param(
            "2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999Z", id="a leap second is kept in its minute"
        ),
        pytest.param(None, None, id="null stays absent"),
    ],
)
def test_timestamps_normalise(text: str | None, normalised: str | None) -> None:
    assert normalize_timestamp(text, "sourceTimestamp") == normalised


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("2026-04-22T08:00:12", id="no offset"),
        pytest.param("2026-04-22 08:00:12Z", id="space instead of T"),
        pytest.param("2026-02-30T08:00:00Z", id="no such day"),
        pytest.param("2026-04-22T24:00:00Z", id="hour 24"),
        pytest.param("2026-04-22T08:00:00+24:00", id="offset out of range"),
        pytest.param("yesterday", id="words"),
        pytest.param(1713772812, id="a number"),
    ],
)
def test_timestamps_that_are_not_rfc3339_with_offset_are_refused(text: Any) -> None:
    with pytest.raises(ContractError):
        normalize_timestamp(text, "sourceTimestamp")


def test_payload_hash_depends_on_content_and_time_only() -> None:
    a = payload_hash({"state": "Trip", "severity": "High"}, "2026-04-22T08:00:12.120Z")
    assert a == payload_hash({"severity": "High", "state": "Trip"}, "2026-04-22T08:00:12.120Z")
    assert a != payload_hash({"state": "Trip", "severity": "Low"}, "2026-04-22T08:00:12.120Z")
    assert a != payload_hash({"state": "Trip", "severity": "High"}, None)
    assert len(a) == 64 and a == a.lower()


@pytest.mark.parametrize(
    ("key", "ce_id"),
    [
        pytest.param(Key("P/T", "T91", "B17"), "B17:T91", id="plain ids"),
        pytest.param(Key("P/T", "2:3", "1"), "1:2%3A3", id="a colon inside transitionId is encoded"),
        pytest.param(Key("P/T", "3", "1:2"), "1%3A2:3", id="a colon inside bootId is encoded"),
        pytest.param(Key("P/T", "a b/ü", "B~1.x_-"), "B~1.x_-:a%20b%2F%C3%BC", id="UTF-8 bytes are encoded"),
    ],
)
def test_cloudevents_id(key: Key, ce_id: str) -> None:
    assert ce_transition_id(key) == ce_id


def test_cloudevents_sources() -> None:
    assert ce_source("plant-1", "PUMP-07/Trip") == "plant-1/PUMP-07/Trip"
    assert ce_source("plant-1", "PUMP/07/Trip") == "plant-1/PUMP/07%2FTrip"
    assert ce_source("plant-1", "dev") != ce_source("plant-1", "dev/")
    assert ce_device_source("plant-1", "PUMP 7") == "plant-1/PUMP%207"
    assert ce_anomaly_id("gap", "B17", "92", "93") == "gap:B17:92:93"
    with pytest.raises(ContractError):
        ce_source("plant 1", "P/T")


def test_idempotency_key_is_sha256_of_source_newline_id() -> None:
    import hashlib

    assert idempotency_key("s", "i") == hashlib.sha256(b"s\ni").hexdigest()


ids = st.text(min_size=1, max_size=12)


@given(ids, ids, ids, ids)
def test_cloudevents_id_is_injective(b1: str, t1: str, b2: str, t2: str) -> None:
    same_ids = ce_transition_id(Key("s", t1, b1)) == ce_transition_id(Key("s", t2, b2))
    assert same_ids == ((b1, t1) == (b2, t2))


@given(ids)
def test_pct_is_reversible_and_leaves_no_separator(text: str) -> None:
    encoded = pct(text)
    assert ":" not in encoded and "/" not in encoded
    assert unquote(encoded) == text


@given(st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s), st.text(max_size=8))
def test_cloudevents_source_is_injective_over_device_and_channel(device: str, channel: str) -> None:
    source = f"{device}/{channel}"
    encoded = ce_source("site", source)
    _, dev, ch = encoded.split("/")
    assert (unquote(dev), unquote(ch)) == (device, channel)


def _normalised_the_long_way(text: str) -> str | Exception:
    """What `normalize_timestamp` gives when the normal form is not taken as it is."""
    from agent.core.timestamps import format_timestamp, parse_timestamp

    try:
        return format_timestamp(parse_timestamp(text, "sourceTimestamp"))
    except ContractError as exc:
        return exc


_TWO = st.integers(min_value=0, max_value=99).map(lambda n: f"{n:02d}")


@given(
    year=st.integers(min_value=0, max_value=9999).map(lambda n: f"{n:04d}"),
    month=_TWO,
    day=_TWO,
    hour=_TWO,
    minute=_TWO,
    second=_TWO,
    millis=st.integers(min_value=0, max_value=999).map(lambda n: f"{n:03d}"),
)
def test_a_timestamp_in_normal_form_is_kept_exactly_when_it_exists(
    year: str, month: str, day: str, hour: str, minute: str, second: str, millis: str
) -> None:
    text = f"{year}-{month}-{day}T{hour}:{minute}:{second}.{millis}Z"
    long_way = _normalised_the_long_way(text)
    try:
        got: str | Exception = normalize_timestamp(text, "sourceTimestamp") or ""
    except ContractError as exc:
        got = exc
    if isinstance(long_way, Exception):
        assert isinstance(got, ContractError)
    else:
        assert got == long_way


_ID = st.one_of(st.none(), st.just(""), st.text(max_size=5))


@given(
    source=_ID,
    transition_id=_ID,
    boot_id=_ID,
    source_timestamp=st.one_of(st.none(), st.just("2026-04-22T08:00:12.120Z")),
    raw=st.one_of(st.text(max_size=5), st.binary(max_size=5)),
    line=st.one_of(st.none(), st.integers(1, 10**6)),
    missing=st.sampled_from([(), ("source",), ("transitionId", "bootId")]),
    evidence=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    payload_json=st.sampled_from(["", '{"a":1}']),
)
def test_imported_delivery_is_the_dataclass_built_by_its_init(
    source: str | None,
    transition_id: str | None,
    boot_id: str | None,
    source_timestamp: str | None,
    raw: str | bytes,
    line: int | None,
    missing: tuple[str, ...],
    evidence: dict[str, Any],
    payload_json: str,
) -> None:
    payload = {"a": 1}
    args = (source, transition_id, boot_id, source_timestamp, "2026-04-22T09:00:00.000Z", payload, "h")
    fast = imported_delivery(*args, raw, "import:f", line, missing, evidence, payload_json)
    slow = Delivery(
        *args,
        raw=raw,
        receiver="import:f",
        live=True,
        line=line,
        missing=missing,
        evidence=evidence,
        payload_json=payload_json,
    )
    assert type(fast) is Delivery
    for name in Delivery.__slots__:  # `key` is left out of ==, so every slot is compared
        assert getattr(fast, name) == getattr(slow, name), name
        assert type(getattr(fast, name)) is type(getattr(slow, name)), name
    assert fast == slow


@given(
    transition_id=st.one_of(st.just(""), st.text(max_size=5)),
    boot_id=_ID,
    source_timestamp=st.one_of(st.none(), st.just("2026-04-22T08:00:12.120Z")),
    live=st.booleans(),
    missing=st.sampled_from([(), ("bootId",)]),
    evidence=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    payload_json=st.sampled_from(["", '{"a":1}']),
    basis=st.sampled_from(["counter", "ring", "window"]),
)
def test_polled_delivery_is_the_dataclass_built_by_its_init(
    transition_id: str,
    boot_id: str | None,
    source_timestamp: str | None,
    live: bool,
    missing: tuple[str, ...],
    evidence: dict[str, Any],
    payload_json: str,
    basis: str,
) -> None:
    payload = {"a": 1}
    args = ("PLC-1/Trip", transition_id, boot_id, source_timestamp, "2026-04-22T09:00:00.000Z", payload, "h")
    fast = polled_delivery(*args, '{"read":{}}', "modbus:x", live, missing, evidence, payload_json, basis)
    slow = Delivery(
        *args,
        raw='{"read":{}}',
        receiver="modbus:x",
        live=live,
        missing=missing,
        evidence=evidence,
        payload_json=payload_json,
        basis=basis,
    )
    assert type(fast) is Delivery
    for name in Delivery.__slots__:  # `key` is left out of ==, so every slot is compared
        assert getattr(fast, name) == getattr(slow, name), name
        assert type(getattr(fast, name)) is type(getattr(slow, name)), name
    assert fast == slow


@given(st.text(min_size=1))
def test_non_empty_ascii_text_is_its_own_id(value: str) -> None:
    # The importer takes such an id as it is, without normalize_id (agent/core/intake.py).
    if value.isascii():
        assert normalize_id(value, "source") == value


@pytest.mark.parametrize("decision", [Decision.INSERTED, Decision.DUPLICATE, Decision.CONFLICT])
@pytest.mark.parametrize("flags", [(), ("payload_pruned",)])
def test_the_decisions_fast_outcome_is_the_dataclass_built_by_its_init(
    decision: Decision, flags: tuple[str, ...]
) -> None:
    dup = None if decision is Decision.INSERTED else 7
    fast = decide._outcome(decision, 7, dup, flags)
    slow = decide.Outcome(decision, 7, dup, flags=flags)
    assert type(fast) is decide.Outcome
    assert [getattr(fast, n) for n in decide.Outcome.__slots__] == [
        getattr(slow, n) for n in decide.Outcome.__slots__
    ]
    assert fast == slow

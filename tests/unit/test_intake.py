"""One offline-file line to a Delivery or a Rejection (rules of contract sections 2 and 5)."""

from __future__ import annotations

import pytest

from agent.core.contract import Delivery, Rejection
from agent.core.intake import MAX_NESTING, nesting_depth, parse_delivery

NOW = "2026-04-22T09:00:00.000Z"


@pytest.mark.parametrize(
    ("raw", "reason_part"),
    [
        pytest.param(b"{not json", "not JSON", id="broken JSON"),
        pytest.param(b"[1,2]", "not a JSON object", id="a list"),
        pytest.param(b'"text"', "not a JSON object", id="a string"),
        pytest.param(b"\xff\xfe{}", "not UTF-8", id="bytes that are not UTF-8"),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","payload":[1]}', "payload", id="payload a list"
        ),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","payload":null}', "payload", id="payload null"
        ),
        pytest.param(b'{"source":"P/T","transitionId":1.5,"bootId":"B"}', "transitionId", id="fractional id"),
        pytest.param(b'{"source":"P/T","transitionId":1,"bootId":false}', "bootId", id="boolean id"),
        pytest.param(b'{"source":["P"],"transitionId":1,"bootId":"B"}', "source", id="list source"),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","sourceTimestamp":"2026-04-22"}',
            "sourceTimestamp",
            id="date without time",
        ),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","arrivalAt":"now"}',
            "arrivalAt",
            id="bad arrivalAt",
        ),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","payload":{"v":NaN}}', "not JSON", id="NaN"
        ),
        pytest.param(
            b'{"source":"P/T","transitionId":1,"bootId":"B","payload":{"v":"\\ud800"}}',
            "canonical",
            id="lone surrogate in payload",
        ),
    ],
)
def test_rejections_keep_raw_bytes_reason_and_line(raw: bytes, reason_part: str) -> None:
    got = parse_delivery(raw, arrival_at=NOW, receiver="t", line=7)
    assert isinstance(got, Rejection)
    assert reason_part in got.reason
    assert got.raw == raw and got.line == 7


def test_a_complete_line() -> None:
    raw = (
        '{"source":"PUMP-07/Trip","transitionId":91,"bootId":"B17","sourceTimestamp":"2026-04-22T10:00:12.120+02:00",'
        '"arrivalAt":"2026-04-22T08:00:12.180Z","payload":{"state":"Trip"},"gateway":"gw-7"}'
    )
    got = parse_delivery(raw, arrival_at=NOW, receiver="t", line=1)
    assert isinstance(got, Delivery)
    assert (got.source, got.transition_id, got.boot_id) == ("PUMP-07/Trip", "91", "B17")
    assert got.source_timestamp == "2026-04-22T08:00:12.120Z"
    assert got.arrival_at == "2026-04-22T08:00:12.180Z"
    assert got.evidence == {"gateway": "gw-7"}
    assert got.key is not None and got.missing == ()


@pytest.mark.parametrize(
    ("raw", "missing"),
    [
        pytest.param('{"source":"P/T","transitionId":"T1"}', ("bootId",), id="no bootId"),
        pytest.param('{"source":"P/T","transitionId":"T1","bootId":""}', ("bootId",), id="empty bootId"),
        pytest.param('{"transitionId":"T1","bootId":null}', ("source", "bootId"), id="two missing"),
        pytest.param("{}", ("source", "transitionId", "bootId"), id="nothing at all"),
    ],
)
def test_incomplete_identity_is_not_a_rejection(raw: str, missing: tuple[str, ...]) -> None:
    got = parse_delivery(raw, arrival_at=NOW, receiver="t")
    assert isinstance(got, Delivery)
    assert got.key is None and got.missing == missing
    assert got.boot_id is None or got.boot_id == ""


def test_arrival_defaults_to_now_and_payload_to_empty_object() -> None:
    got = parse_delivery('{"source":"P/T","transitionId":"1","bootId":"B"}', arrival_at=NOW, receiver="t")
    assert isinstance(got, Delivery)
    assert got.arrival_at == NOW and got.payload == {} and got.payload_json == "{}"


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('{"a": 1}', 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),
        ('{"a": "\\\\\\"[[["}', 1),
        ("[]", 1),
        ("1", 0),
    ],
)
def test_nesting_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


@pytest.mark.parametrize("levels", [MAX_NESTING - 1, MAX_NESTING, 10_000, 200_000])
def test_deep_nesting_is_rejected_with_a_reason_never_a_recursion_error(levels: int) -> None:
    inner = "[" * (levels - 1) + "]" * (levels - 1)
    line = '{"source": "PUMP-07/Trip", "transitionId": 1, "bootId": "B1", "payload": {"v": ' + inner + "}}"
    out = parse_delivery(line, arrival_at="2026-04-22T08:00:00.000Z", receiver="t")
    # the payload object itself is one level, the outer object another: levels + 1 in all
    if levels + 1 <= MAX_NESTING:
        assert isinstance(out, Delivery)
    else:
        assert isinstance(out, Rejection)
        assert f"at most {MAX_NESTING}" in out.reason and str(levels + 1) in out.reason

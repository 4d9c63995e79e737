"""Outcome classification tables: HTTP status codes, Retry-After, MQTT reason codes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.core.send_outcome import (
    DELIVERED,
    SendOutcome,
    Verdict,
    all_delivered,
    classify_http,
    classify_mqtt_reason,
    needs_split,
    parse_retry_after,
    rejected,
    retry,
)

NOW = datetime(2026, 4, 22, 8, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        pytest.param(200, Verdict.DELIVERED, id="200 OK is delivered"),
        pytest.param(202, Verdict.DELIVERED, id="202 Accepted is delivered"),
        pytest.param(204, Verdict.DELIVERED, id="204 No Content is delivered"),
        pytest.param(400, Verdict.REJECTED, id="400 Bad Request dead-letters the event"),
        pytest.param(409, Verdict.REJECTED, id="409 Conflict dead-letters the event"),
        pytest.param(413, Verdict.REJECTED, id="413 for a single event dead-letters it"),
        pytest.param(422, Verdict.REJECTED, id="422 Unprocessable dead-letters the event"),
        pytest.param(408, Verdict.RETRY, id="408 Request Timeout is retried"),
        pytest.param(425, Verdict.RETRY, id="425 Too Early is retried"),
        pytest.param(429, Verdict.RETRY, id="429 Too Many Requests is retried"),
        pytest.param(500, Verdict.RETRY, id="500 is retried"),
        pytest.param(502, Verdict.RETRY, id="502 from a proxy is retried"),
        pytest.param(503, Verdict.RETRY, id="503 Service Unavailable is retried"),
        pytest.param(401, Verdict.RETRY, id="401 is about the token not the event so it is retried"),
        pytest.param(403, Verdict.RETRY, id="403 is about the credentials so it is retried"),
        pytest.param(404, Verdict.RETRY, id="404 is a wrong URL not a poison event so it is retried"),
        pytest.param(415, Verdict.RETRY, id="415 is about the endpoint so it is retried"),
        pytest.param(302, Verdict.RETRY, id="an unfollowed redirect is a misconfiguration so it is retried"),
    ],
)
def test_http_status_table(status: int, verdict: Verdict) -> None:
    assert classify_http(status, None, NOW).verdict is verdict


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param(None, None, id="no header"),
        pytest.param("7", 7.0, id="delta seconds"),
        pytest.param(" 120 ", 120.0, id="delta seconds with blanks"),
        pytest.param("Wed, 22 Apr 2026 08:00:30 GMT", 30.0, id="an HTTP date thirty seconds ahead"),
        pytest.param("Wed, 22 Apr 2026 07:59:00 GMT", 0.0, id="an HTTP date in the past means now"),
        pytest.param("soon", None, id="garbage is ignored"),
        pytest.param("-5", None, id="a negative number is ignored"),
    ],
)
def test_retry_after_parsing(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, NOW) == seconds


@pytest.mark.parametrize(
    ("status", "header", "seconds"),
    [
        pytest.param(429, "3", 3.0, id="429 carries its Retry-After"),
        pytest.param(503, "Wed, 22 Apr 2026 08:01:00 GMT", 60.0, id="503 carries a dated Retry-After"),
        pytest.param(400, "3", None, id="a rejection has no retry time"),
    ],
)
def test_retry_after_is_honoured_on_retry_statuses(status: int, header: str, seconds: float | None) -> None:
    assert classify_http(status, header, NOW).retry_after_s == seconds


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        pytest.param(0x00, Verdict.DELIVERED, id="success is delivered"),
        pytest.param(0x10, Verdict.DELIVERED, id="no matching subscribers is still delivered"),
        pytest.param(0x80, Verdict.REJECTED, id="unspecified error is rejected"),
        pytest.param(0x87, Verdict.REJECTED, id="not authorized by ACL is rejected"),
        pytest.param(0x90, Verdict.REJECTED, id="topic name invalid is rejected"),
        pytest.param(0x99, Verdict.REJECTED, id="payload format invalid is rejected"),
        pytest.param(0x97, Verdict.RETRY, id="quota exceeded is about load so it is retried"),
    ],
)
def test_mqtt_reason_code_table(code: int, verdict: Verdict) -> None:
    assert classify_mqtt_reason(code).verdict is verdict


@pytest.mark.parametrize(
    ("outcome", "size", "split"),
    [
        pytest.param(rejected("HTTP 400"), 10, True, id="a refused batch is split"),
        pytest.param(rejected("HTTP 400"), 1, False, id="a refused single event is the poison"),
        pytest.param(retry("HTTP 503"), 10, False, id="a retried batch stays whole"),
    ],
)
def test_split_decision(outcome: object, size: int, split: bool) -> None:
    assert needs_split(outcome, size) is split  # type: ignore[arg-type]


def test_all_delivered_counts_every_delivered_outcome_and_nothing_else() -> None:
    assert all_delivered([])
    assert all_delivered([DELIVERED] * 3)
    assert all_delivered([DELIVERED, SendOutcome(Verdict.DELIVERED)])  # equal, not the same object
    assert not all_delivered([DELIVERED, retry("timeout"), DELIVERED])
    assert not all_delivered([rejected("HTTP 400")])
    assert not all_delivered([SendOutcome(Verdict.DELIVERED, "odd reason")])

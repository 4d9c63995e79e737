"""What one delivery attempt of one event came to: delivered, retry or rejected.
Pure: classifies statuses and reason codes, sends nothing and reads no clock of its own.

* delivered: the upstream acknowledged it (HTTP 2xx, MQTT PUBACK). Marked sent.
* retry:     not acknowledged, nothing is known to be wrong with the event
             (timeouts, connection loss, 408/425/429/5xx, and refusals that say
             something about the endpoint rather than the event: 401, 403, 404,
             405, 407, 415, 421). Stays pending; the forwarder backs off.
* rejected:  the upstream refused this event (other 4xx, MQTT v5 reason code
             >= 0x80). Dead-lettered: never retried automatically, always
             counted and shown; `edge-agent outbox retry` sends it again.

Why 401/404 & co are not dead letters: a plain "every other 4xx is
rejected" rule would dead-letter a whole backlog in seconds after a token
expired or a URL was mistyped. Those statuses are the same for every event, so they
are retried (and logged as errors for an operator) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum


class Verdict(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """The verdict on one event; `reason` says why (kept as the outbox row's `last_error`)."""

    verdict: Verdict
    reason: str = ""
    retry_after_s: float | None = None


DELIVERED = SendOutcome(Verdict.DELIVERED)


def all_delivered(outcomes: list[SendOutcome]) -> bool:
    """Every outcome is delivered. The sinks answer with the one `DELIVERED`, so a batch that went
    through is counted in one pass over identities (an outcome equal to it counts as well)."""
    return outcomes.count(DELIVERED) == len(outcomes)


RETRY_STATUSES = frozenset({408, 425, 429})
ENDPOINT_STATUSES = frozenset({401, 403, 404, 405, 407, 415, 421})


def retry(reason: str, retry_after_s: float | None = None) -> SendOutcome:
    return SendOutcome(Verdict.RETRY, reason, retry_after_s)


def rejected(reason: str) -> SendOutcome:
    return SendOutcome(Verdict.REJECTED, reason)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """`Retry-After` as seconds from `now`: delta-seconds or an HTTP-date; None when absent or bad."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def classify_http(status: int, retry_after: str | None, now: datetime, detail: str = "") -> SendOutcome:
    """SendOutcome of an HTTP response with `status` (and its `Retry-After` header, if any)."""
    what = f"HTTP {status}" + (f": {detail}" if detail else "")
    if 200 <= status < 300:
        return DELIVERED
    if status in RETRY_STATUSES or 500 <= status < 600:
        return retry(what, parse_retry_after(retry_after, now))
    if status in ENDPOINT_STATUSES:
        return retry(
            f"{what} (endpoint refused; check URL and credentials)", parse_retry_after(retry_after, now)
        )
    if 400 <= status < 500:
        return rejected(what)
    # 1xx/3xx after redirects were followed: the endpoint is misconfigured, not the event.
    return retry(f"{what} (unexpected status)")


# MQTT v5 reason codes that are about load, not about the event.
MQTT_RETRY_CODES = frozenset({0x97})  # Quota exceeded


def classify_mqtt_reason(code: int, name: str = "") -> SendOutcome:
    """SendOutcome of an MQTT v5 PUBACK reason code (3.1.1 PUBACKs carry none: pass 0)."""
    if code < 0x80:
        return DELIVERED
    what = f"MQTT PUBACK reason 0x{code:02x}" + (f" {name}" if name else "")
    if code in MQTT_RETRY_CODES:
        return retry(what)
    return rejected(what)


def needs_split(outcome: SendOutcome, batch_len: int) -> bool:
    """A batch refused as a whole is split until the one event the upstream refuses is found."""
    return outcome.verdict is Verdict.REJECTED and batch_len > 1

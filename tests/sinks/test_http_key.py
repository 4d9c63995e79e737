"""The HTTP sink's batch Idempotency-Key (the value, not just its shape)."""

from __future__ import annotations

import hashlib

from agent.sinks.encode import Event
from agent.sinks.http import batch_idempotency_key


def ev(source: str, ident: str) -> Event:
    return Event(1, source, ident, "io.edgeagent.transition", "transition", "d", "c", b"{}")


def key(source: str, ident: str) -> str:
    return hashlib.sha256(f"{source}\n{ident}".encode()).hexdigest()


def test_a_single_event_carries_the_contract_key() -> None:
    assert batch_idempotency_key([ev("plant/P%201/Trip", "B17:T91")]) == key("plant/P%201/Trip", "B17:T91")


def test_a_batch_carries_the_sha256_of_its_events_keys_joined_by_newlines() -> None:
    events = [ev("plant/P/Trip", f"B17:{n}") for n in range(3)] + [ev("plant/é/x", "gap:B1:1:2")]
    joined = "\n".join(key(e.ce_source, e.ce_id) for e in events)
    assert batch_idempotency_key(events) == hashlib.sha256(joined.encode()).hexdigest()
    assert batch_idempotency_key(events[:3]) != batch_idempotency_key(events)

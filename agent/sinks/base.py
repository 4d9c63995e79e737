"""The `Sink` interface: how the forwarder hands encoded events to one upstream.
An interface only: no I/O here, and no sink ever touches the store.

A sink is one upstream connection (MQTT broker, HTTP endpoint). It never
touches the store; the forwarder reads the outbox, encodes, calls
`publish()`, and settles each row by the outcome it gets back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.core.send_outcome import SendOutcome
from agent.sinks.encode import Event


class Sink(Protocol):
    """One upstream. Used by one forwarder task at a time.

    `overlapping` True: `publish()` may be called again before an earlier call returned; the
    events of the calls are offered in call order (MQTT: one window of messages in flight
    across calls). The forwarder overlaps calls only while the sink says it is `connected`
    (so two calls never race to connect), and a call that would have to connect while an
    earlier one is still in progress returns `retry` without sending (the earlier call lost
    the connection; its events must go out first). False: calls never overlap.

    Call order: `publish()` any number of times, then `close()` once. There is
    no separate connect step: `publish()` connects when it has no live
    connection (and so is the reconnect loop, paced by the forwarder's
    backoff), and drops a connection it no longer trusts.
    """

    name: str
    overlapping: bool

    async def publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        """Offer `events` (in outbox order) and return one SendOutcome per event, in the same order.

        Guarantees:
        * `delivered` only on proof of acknowledgement (MQTT PUBACK at QoS 1,
          HTTP 2xx). Nothing is ever reported delivered because it was queued
          or written to a socket.
        * `retry` when it is not known whether the upstream took the event
          (connection lost, timeout, overload, endpoint-level refusal). The
          upstream may have it anyway: it deduplicates on (source, id).
        * `rejected` only when the upstream refused that one event (HTTP 4xx
          after the batch was split down to the event, MQTT v5 reason code
          >= 0x80). The event is dead-lettered.
        * Events are offered in order; a `retry` for event k means no event
          after k was reported delivered in this call *before* k was offered,
          but with a window of messages in flight, k+1 may be acknowledged
          while k is not. The forwarder resends every non-delivered row from
          the head of the queue, so the first arrival of every event upstream
          stays in order.
        Network errors are never raised: they come back as `retry` outcomes.
        Cancellation is honoured (nothing is marked; the rows stay pending).
        """
        ...

    async def close(self) -> None:
        """Close the connection gracefully (bounded by the sink's own timeouts). Idempotent."""
        ...

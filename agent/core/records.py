"""The record types the store keeps and hands the sinks, and one claimed outbox row (pure data).

`agent.core.decide` makes new BootObserved records; the store builds all of them from SQLite
(`agent.store.outbox`); `agent.sinks.encode` turns them into CloudEvents. Sinks never see
SQLite, only these values; nothing here does I/O.
JSON columns stay as their stored text (`payload_json`, `evidence_json`), so
the encoder can splice them into the event without parsing them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

KINDS = ("transition", "boot_observed", "gap", "anomaly", "identity_incomplete")

# One claimed outbox row of a transition as the store reads it (`agent.store.outbox_head.Claimed.rows`)
# and the encoder takes it (`agent.sinks.encode.transition_row_encoder`), for the common row of a
# backlog drain, which needs no Entry or Transition built: (outbox_id, kind, attempts (as stored,
# before this attempt), ref_id, source, transition_id, boot_id, source_ts, payload, first_arrival,
# basis), where kind is None for a transition and basis None for "counter" (the values SQLite
# would otherwise turn into a new string per row), and source is None when the record is gone.
TransitionRow = tuple[Any, ...]


class Transition(NamedTuple):
    """A canonical event (`events` row). `basis` is its identity basis (`agent.core.basis`).

    A named tuple, like `Entry`: a backlog drain builds one of each per row, and a frozen
    dataclass cost about 1 µs each to build (a tenth of a drain's time per event)."""

    canonical_id: int
    source: str
    transition_id: str
    boot_id: str
    source_ts: str | None
    payload_json: str
    first_arrival: str
    basis: str = "counter"


@dataclass(frozen=True, slots=True)
class BootObserved:
    """A new boot generation of a device (`boots` row; `boot_row` is 0 until it is stored)."""

    boot_row: int
    device: str
    boot_id: str
    previous_boot_id: str | None
    first_arrival: str
    source_ts: str | None
    live: bool
    evidence_json: str


@dataclass(frozen=True, slots=True)
class ChannelAnomaly:
    """A gap, wrap, reset or ring overrun of one channel (`anomalies` row)."""

    anomaly_id: int
    source: str
    boot_id: str
    kind: str
    from_value: str
    to_value: str
    detected_at: str
    evidence_json: str


@dataclass(frozen=True, slots=True)
class IdentityIncomplete:
    """An arrival without a complete key (`arrivals` row on the pending list)."""

    arrival_id: int
    source: str | None
    transition_id: str | None
    boot_id: str | None
    source_ts: str | None
    arrival_at: str
    receiver: str
    raw: str
    basis: str = "counter"


Record = Transition | BootObserved | ChannelAnomaly | IdentityIncomplete


class Entry(NamedTuple):
    """One claimed outbox row. `attempt` is this attempt's number (1, 2, ...), already stored.

    `record` is None when the referenced row no longer exists (it cannot be
    encoded; the forwarder dead-letters the entry with a reason).
    """

    outbox_id: int
    kind: str
    ref_id: int
    attempt: int
    record: Record | None

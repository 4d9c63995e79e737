"""The write statements of one recorded batch and the SQL parameter rows they take.

Pure: turns deliveries, rejections and their outcomes into tuples; runs no SQL itself.
"""

from __future__ import annotations

from typing import Any

from agent.core.contract import Delivery, Key, Rejection
from agent.core.decide import EventUpdate, Outcome

INSERT_EVENT = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id, identity_basis) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT(source, transition_id, boot_id) DO NOTHING"
)
# Once retention has pruned payloads, a key may live on only as a compact key record: the insert
# must not make a second canonical for it (the unique index of `events` no longer sees it).
INSERT_UNLESS_KEY_RECORD = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id, identity_basis)"
    " SELECT ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11"
    " WHERE NOT EXISTS (SELECT 1 FROM event_keys x"
    " WHERE x.source = ?1 AND x.transition_id = ?2 AND x.boot_id = ?3)"
    " ON CONFLICT(source, transition_id, boot_id) DO NOTHING"
)
INSERT_ARRIVAL = (
    "INSERT INTO arrivals(arrival_id, source, transition_id, boot_id, source_ts, arrival_at,"
    " receiver, payload_hash, decision, canonical_id, reason, flags, line, live, raw, identity_basis)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
UPDATE_EVENT_COUNTS = (
    "UPDATE events SET duplicate_count = duplicate_count + ?,"
    " conflict_count = conflict_count + ?,"
    " status = CASE WHEN conflict_count + ? > 0 THEN 'DuplicateConflict' ELSE status END,"
    " first_arrival = min(first_arrival, ?), last_arrival = max(last_arrival, ?)"
    " WHERE canonical_id = ?"
)
INSERT_OUTBOX = "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at) VALUES (?,?,?,?)"


def event_row(key: Key, item: Delivery, arrival_id: int) -> tuple[Any, ...]:
    return (
        key.source,
        key.transition_id,
        key.boot_id,
        key.device,
        item.source_timestamp,
        item.payload_json,
        item.payload_hash,
        item.arrival_at,
        item.arrival_at,
        arrival_id,
        str(item.basis),
    )


def event_update_row(u: EventUpdate) -> tuple[Any, ...]:
    return (u.later_arrivals, u.conflicts, u.conflicts, u.first_arrival, u.last_arrival, u.canonical_id)


def arrival_row(arrival_id: int, item: Delivery | Rejection, oc: Outcome) -> tuple[Any, ...]:
    flags = " ".join(oc.flags)
    if isinstance(item, Rejection):
        return (
            arrival_id,
            None,
            None,
            None,
            None,
            item.arrival_at,
            item.receiver,
            None,
            oc.decision._value_,  # the member's text without the property lookup
            None,
            oc.reason,
            flags,
            item.line,
            1,
            item.raw,
            None,
        )
    return (
        arrival_id,
        item.source,
        item.transition_id,
        item.boot_id,
        item.source_timestamp,
        item.arrival_at,
        item.receiver,
        item.payload_hash,
        oc.decision._value_,  # the member's text without the property lookup
        oc.canonical_id,
        oc.reason,
        flags,
        item.line,
        int(item.live),
        item.raw,
        str(item.basis),
    )

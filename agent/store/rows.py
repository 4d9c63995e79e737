"""The write statements of one recorded batch and the SQL parameter rows they take.

Pure: turns deliveries, rejections and their outcomes into tuples; runs no SQL itself.
"""

from __future__ import annotations

from typing import Any

from agent.core.contract import Delivery, Key, Rejection
from agent.core.decide import EventUpdate, Outcome

EVENT_COLUMNS = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id, identity_basis)"
)
EVENT_WIDTH = 11
# A new canonical event with what later arrivals of the same batch add to it (`decide.EventUpdate`),
# the values the UPDATE of the counts below would give it.
COUNTED_EVENT_COLUMNS = (
    "INSERT INTO events(source, transition_id, boot_id, device, source_ts, payload, payload_hash,"
    " first_arrival, last_arrival, first_arrival_id, identity_basis, duplicate_count, conflict_count,"
    " status)"
)
COUNTED_EVENT_WIDTH = 14
ARRIVAL_COLUMNS = (
    "INSERT INTO arrivals(arrival_id, source, transition_id, boot_id, source_ts, arrival_at,"
    " receiver, payload_hash, decision, canonical_id, reason, flags, line, live, raw, identity_basis)"
)
ARRIVAL_WIDTH = 16
# The counts of every canonical event a batch repeated (each duplicate or conflict arrival is one
# later arrival of its canonical event), from the batch's own tally (`decide.EventUpdate`) as rows
# (canonical_id, later, conflicts, first, last) in a VALUES list: no read of the batch's arrivals
# back and no grouping of them in SQLite. A pruned event is not in `events` any more: untouched.
UPDATE_EVENT_COUNTS_HEAD = "WITH a(id, later, conflicts, first, last) AS (VALUES "
UPDATE_EVENT_COUNTS_TAIL = (
    ") UPDATE events SET duplicate_count = duplicate_count + a.later,"
    " conflict_count = conflict_count + a.conflicts,"
    " status = CASE WHEN conflict_count + a.conflicts > 0 THEN 'DuplicateConflict' ELSE status END,"
    " first_arrival = min(first_arrival, a.first), last_arrival = max(last_arrival, a.last)"
    " FROM a WHERE events.canonical_id = a.id"
)
UPDATE_EVENT_COUNTS_WIDTH = 5
INSERT_OUTBOX = "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at) VALUES (?,?,?,?)"
INSERT_OUTBOX_ATTEMPTS = (
    "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, created_at, attempts) VALUES (?,?,?,?,?)"
)


def event_row(key: Key, item: Delivery, arrival_id: int) -> tuple[Any, ...]:
    return _event_values(key, item, arrival_id, item.arrival_at, item.arrival_at)


def counted_event_row(key: Key, item: Delivery, arrival_id: int, upd: EventUpdate | None) -> tuple[Any, ...]:
    if upd is None:
        return (*event_row(key, item, arrival_id), 0, 0, "Canonical")
    at = item.arrival_at
    # text: SQLite's min/max compare UTF-8 bytes, in code point order, as Python's do
    values = _event_values(key, item, arrival_id, min(at, upd.first_arrival), max(at, upd.last_arrival))
    status = "DuplicateConflict" if upd.conflicts > 0 else "Canonical"
    return (*values, upd.later_arrivals, upd.conflicts, status)


def _event_values(key: Key, item: Delivery, arrival_id: int, first: str, last: str) -> tuple[Any, ...]:
    """The `EVENT_COLUMNS` values of a new canonical event, arrived first at `first`, last at `last`."""
    return (
        key.source,
        key.transition_id,
        key.boot_id,
        key.device,
        item.source_timestamp,
        item.payload_json,
        item.payload_hash,
        first,
        last,
        arrival_id,
        str(item.basis),
    )


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

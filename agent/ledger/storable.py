"""What PostgreSQL text can hold: a delivery with U+0000 in an id or its payload is `rejected`."""

from __future__ import annotations

from agent.core.contract import Delivery, Rejection
from agent.ledger.arrivals import Arrival, Received

_NUL = "\x00"


def storable(arr: Arrival) -> Arrival:
    """The arrival as PostgreSQL can hold it: text cannot contain U+0000, so a delivery carrying
    one in an id, its payload or a record's fields is `rejected` with that reason (its raw bytes
    are kept), and evidence text has it escaped. The SQLite store accepts such text; this is the
    one input on which the two differ."""
    it = arr.item
    if type(it) is Delivery and _NUL not in (
        f"{arr.gateway}{arr.ce_id}{it.source}{it.transition_id}{it.boot_id}{it.payload_json}"
    ):
        return arr  # the common case, looked at in one piece
    gateway = arr.gateway.replace(_NUL, "\\u0000")
    ce = arr.ce_id.replace(_NUL, "\\u0000") if arr.ce_id else arr.ce_id
    texts: tuple[str | None, ...] = ()
    if isinstance(it, Delivery):
        texts = (it.source, it.transition_id, it.boot_id, it.payload_json)
    elif isinstance(it, Received):
        texts = (it.source, it.ce_id, it.boot_id, *(v for v in it.fields.values() if isinstance(v, str)))
    elif _NUL in it.reason:
        it = Rejection(it.raw, it.reason.replace(_NUL, "\\u0000"), it.arrival_at, it.receiver, it.line)
    if any(t and _NUL in t for t in texts):
        it = Rejection(
            it.raw,
            "U+0000 in an id or the payload cannot be stored in PostgreSQL text",
            it.arrival_at,
            "",
            it.line,
        )
    if it is arr.item and gateway == arr.gateway and ce == arr.ce_id:
        return arr
    return Arrival(it, gateway, arr.via, arr.attempt, arr.replayed, ce, arr.key)

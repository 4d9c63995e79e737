"""A gateway's own records (BootObserved, gap, anomaly, identity incomplete) into their tables.

Each table is unique on the record's CloudEvents (`source`, `id`) (a boot on (device, bootId),
which the gateway's `source`/`id` are); `INSERT ... ON CONFLICT DO NOTHING RETURNING` arbitrates
in (source, id) order, so the first copy is `inserted` with its evidence standing and every
later one (another gateway's sighting, a resend) is a `duplicate` arrival. Runs inside the
arbiter's transaction, before the arrival rows it names (those foreign keys are deferred).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from agent.core.contract import Decision
from agent.core.decide import Outcome
from agent.core.jcs import canonical_json
from agent.ledger.arrivals import Arrival, Received

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

INSERT_BOOTS = """
INSERT INTO boot (device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence, arrival_id)
SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]::timestamptz[],
                     %b::text[]::timestamptz[], %b::bool[], %b::text[], %b::bigint[])
ON CONFLICT ON CONSTRAINT boot_key DO NOTHING
RETURNING arrival_id
"""

INSERT_ANOMALIES = """
INSERT INTO anomaly (source, ce_id, boot_id, kind, from_value, to_value, detected_at, evidence, arrival_id)
SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                     %b::text[]::timestamptz[], %b::text[], %b::bigint[])
ON CONFLICT ON CONSTRAINT anomaly_key DO NOTHING
RETURNING arrival_id
"""

INSERT_PENDING = """
INSERT INTO pending (arrival_id, source, ce_id)
SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[])
ON CONFLICT ON CONSTRAINT pending_key DO NOTHING
RETURNING arrival_id
"""


def _sorted(batch: Sequence[Arrival], ids: list[int], kinds: tuple[str, ...]) -> list[tuple[int, Received]]:
    """(arrival id, record) of the given kinds, the first copy of each (source, id), in lock order."""
    seen: dict[tuple[str, str], tuple[int, Received]] = {}
    for aid, arr in zip(ids, batch, strict=True):
        it = arr.item
        if isinstance(it, Received) and it.kind in kinds:
            seen.setdefault((it.source, it.ce_id), (aid, it))
    return [seen[k] for k in sorted(seen, key=lambda k: (k[0].encode(), k[1].encode()))]


async def record(conn: Conn, batch: Sequence[Arrival], ids: list[int]) -> dict[int, Outcome]:
    """Write the batch's records; returns the Outcome of every record arrival by its position."""
    if not any(isinstance(a.item, Received) for a in batch):
        return {}
    won: set[int] = set()
    boots = _sorted(batch, ids, ("boot_observed",))
    if boots:
        cur = await conn.execute(
            INSERT_BOOTS,
            (
                [r.source for _, r in boots],
                [r.boot_id for _, r in boots],
                [r.fields.get("previous_boot_id") for _, r in boots],
                [r.arrival_at for _, r in boots],
                [r.source_ts for _, r in boots],
                [bool(r.fields.get("live", True)) for _, r in boots],
                [canonical_json(r.fields.get("evidence", {})) for _, r in boots],
                [aid for aid, _ in boots],
            ),
        )
        won.update(int(r[0]) for r in await cur.fetchall())
    anomalies = _sorted(batch, ids, ("gap", "anomaly"))
    if anomalies:
        cur = await conn.execute(
            INSERT_ANOMALIES,
            (
                [r.source for _, r in anomalies],
                [r.ce_id for _, r in anomalies],
                [r.boot_id for _, r in anomalies],
                [r.fields["kind"] for _, r in anomalies],
                [r.fields["from"] for _, r in anomalies],
                [r.fields["to"] for _, r in anomalies],
                [r.fields["detected_at"] for _, r in anomalies],
                [canonical_json(r.fields.get("evidence", {})) for _, r in anomalies],
                [aid for aid, _ in anomalies],
            ),
        )
        won.update(int(r[0]) for r in await cur.fetchall())
    pending = _sorted(batch, ids, ("identity_incomplete",))
    if pending:
        cur = await conn.execute(
            INSERT_PENDING,
            ([aid for aid, _ in pending], [r.source for _, r in pending], [r.ce_id for _, r in pending]),
        )
        won.update(int(r[0]) for r in await cur.fetchall())
    out: dict[int, Outcome] = {}
    for i, (aid, arr) in enumerate(zip(ids, batch, strict=True)):
        it = arr.item
        if isinstance(it, Received):
            if aid not in won:
                out[i] = Outcome(Decision.DUPLICATE, None, None)
            elif it.kind == "identity_incomplete":
                out[i] = Outcome(
                    Decision.IDENTITY_INCOMPLETE, None, None, "a gateway's identity-incomplete record"
                )
            else:
                out[i] = Outcome(Decision.INSERTED, None, None)
    return out

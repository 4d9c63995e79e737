"""The prune's steps as SQL: what each table gives up, and the check made again at the delete.

Each step's `select` gives the candidates as (day, id, time, line) where `line` is the row as
`to_jsonb` writes it (what the archive keeps); its `act` deletes (or, for payloads, clears) the
rows of a list of ids that still qualify, and returns how many. A row that gained a reason to be
kept between the archive and the delete stays (it is in the archive too: archived >= pruned).

Arrivals and canonical rows are walked in id order up to the first row inside the period (ids
follow time closely; no index on their time is written per row for this): a row out of order
by a few seconds near the boundary goes at the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import LiteralString


def _day(col: LiteralString) -> LiteralString:
    return "to_char(" + col + " AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


@dataclass(frozen=True, slots=True)
class Step:
    table: str  # the label in `retention_table_run`, the archive's folder
    setting: str  # the `retention:` key whose period it keeps
    id_field: str  # the id in an archived line
    why: str  # said by --dry-run
    select: LiteralString  # (day, id, at, line); %(cutoff)s, %(bound)s
    act: LiteralString  # one row: the count; %(ids)s, %(cutoff)s, %(bound)s
    bound: LiteralString | None = None  # %(bound)s: one row, read once per step; %(cutoff)s


KEPT_ARRIVAL: LiteralString = (
    "(EXISTS (SELECT 1 FROM conflict x WHERE x.arrival_id = a.id)"
    " OR EXISTS (SELECT 1 FROM pending p WHERE p.arrival_id = a.id)"
    " OR EXISTS (SELECT 1 FROM review_mark m WHERE m.arrival_id = a.id)"
    " OR EXISTS (SELECT 1 FROM boot b WHERE b.arrival_id = a.id)"
    " OR EXISTS (SELECT 1 FROM anomaly y WHERE y.arrival_id = a.id))"
)
# The first id inside the period, read once per step (`Step.bound`) and passed as %(bound)s: read
# in every delete it walked the older rows' ids again each time (0.1-0.2 s a statement at 1 million
# canonical rows, 100 statements a run).
ARRIVAL_BOUND: LiteralString = "a.id < %(bound)s"
FIRST_ARRIVAL_INSIDE: LiteralString = (
    "SELECT coalesce((SELECT id FROM arrival WHERE received_at >= %(cutoff)s ORDER BY id LIMIT 1),"
    " 9223372036854775807)"
)
FIRST_CANONICAL_INSIDE: LiteralString = (
    "SELECT coalesce((SELECT id FROM canonical_event WHERE created_at >= %(cutoff)s ORDER BY id LIMIT 1),"
    " 9223372036854775807)"
)

# A canonical row keeps its payload while a conflict names it (both originals side by side) or a
# notification to it is not sent yet (its body carries the event); its identity while any names it.
CANONICAL_NAMED: LiteralString = (
    "(EXISTS (SELECT 1 FROM conflict x WHERE x.canonical_id = e.id)"
    " OR EXISTS (SELECT 1 FROM notification n WHERE n.canonical_id = e.id AND n.state <> 'sent'))"
)
IDENTITY_NAMED: LiteralString = (
    "(EXISTS (SELECT 1 FROM conflict x WHERE x.canonical_id = e.id)"
    " OR EXISTS (SELECT 1 FROM notification n WHERE n.canonical_id = e.id))"
)
PAYLOAD_OLD: LiteralString = (
    "e.payload IS NOT NULL AND e.created_at < %(cutoff)s AND e.id < %(bound)s AND NOT " + CANONICAL_NAMED
)
# The event time, as the arbiter counts it against the horizon (decide.event_time); an identity
# goes only after its payload (so never before `canonical_payloads` has passed).
IDENTITY_OLD: LiteralString = (
    "(e.source_ts < %(cutoff)s OR (e.source_ts IS NULL AND e.inserted_arrival_at < %(cutoff)s))"
    " AND e.payload IS NULL AND NOT " + IDENTITY_NAMED
)
REVIEWED: LiteralString = (
    "SELECT arrival_id, max(marked_at) AS last FROM review_mark GROUP BY arrival_id"
    " HAVING max(marked_at) < %(cutoff)s"
)

STEPS = (
    Step(
        "reviewed",
        "reviewed",
        "arrival_id",
        "conflicts and pending arrivals whose last review mark is older than this (with their marks)",
        "SELECT " + _day("r.last") + ", r.arrival_id, r.last, jsonb_build_object('arrival_id', r.arrival_id,"
        " 'conflict', (SELECT to_jsonb(x) FROM conflict x WHERE x.arrival_id = r.arrival_id),"
        " 'pending', (SELECT to_jsonb(p) FROM pending p WHERE p.arrival_id = r.arrival_id),"
        " 'review_marks', (SELECT jsonb_agg(to_jsonb(m) ORDER BY m.id) FROM review_mark m"
        "  WHERE m.arrival_id = r.arrival_id))::text FROM (" + REVIEWED + ") r",
        "WITH r AS (SELECT arrival_id FROM review_mark WHERE arrival_id = ANY(%(ids)s) GROUP BY arrival_id"
        " HAVING max(marked_at) < %(cutoff)s),"
        " dm AS (DELETE FROM review_mark m USING r WHERE m.arrival_id = r.arrival_id RETURNING 1),"
        " dc AS (DELETE FROM conflict x USING r WHERE x.arrival_id = r.arrival_id RETURNING 1),"
        " dp AS (DELETE FROM pending p USING r WHERE p.arrival_id = r.arrival_id RETURNING 1)"
        " SELECT count(*) FROM r",
    ),
    Step(
        "notification",
        "notifications",
        "id",
        "sent notifications, by the time they were sent",
        "SELECT " + _day("n.sent_at") + ", n.id, n.sent_at, to_jsonb(n)::text FROM notification n"
        " WHERE n.state = 'sent' AND n.sent_at < %(cutoff)s",
        "WITH d AS (DELETE FROM notification WHERE id = ANY(%(ids)s) AND state = 'sent'"
        " AND sent_at < %(cutoff)s RETURNING 1) SELECT count(*) FROM d",
    ),
    Step(
        "arrival",
        "arrivals",
        "id",
        "arrivals (raw lines) received before this, not named by a kept conflict, pending arrival,"
        " review mark, boot or anomaly",
        "SELECT " + _day("a.received_at") + ", a.id, a.received_at, to_jsonb(a)::text FROM arrival a"
        " WHERE " + ARRIVAL_BOUND + " AND a.received_at < %(cutoff)s AND NOT " + KEPT_ARRIVAL,
        "WITH d AS (DELETE FROM arrival a WHERE a.id = ANY(%(ids)s) AND a.received_at < %(cutoff)s"
        " AND NOT " + KEPT_ARRIVAL + " RETURNING 1) SELECT count(*) FROM d",
        FIRST_ARRIVAL_INSIDE,
    ),
    Step(
        "canonical_payload",
        "canonical_payloads",
        "id",
        "canonical payloads written before this (the compact identity stays), not named by a conflict"
        " or an unsent notification",
        "SELECT " + _day("e.created_at") + ", e.id, e.created_at, to_jsonb(e)::text FROM canonical_event e"
        " WHERE " + PAYLOAD_OLD,
        "WITH d AS (UPDATE canonical_event e SET payload = NULL, payload_pruned_at = now()"
        " WHERE e.id = ANY(%(ids)s) AND " + PAYLOAD_OLD + " RETURNING 1) SELECT count(*) FROM d",
        FIRST_CANONICAL_INSIDE,
    ),
    Step(
        "canonical_identity",
        "identity_horizon",
        "id",
        "compact identities whose event time is beyond the identity horizon (payload pruned already,"
        " named by no conflict or notification)",
        "SELECT " + _day("coalesce(e.source_ts, e.inserted_arrival_at)") + ", e.id,"
        " coalesce(e.source_ts, e.inserted_arrival_at), to_jsonb(e)::text FROM canonical_event e"
        " WHERE " + IDENTITY_OLD,
        "WITH d AS (DELETE FROM canonical_event e WHERE e.id = ANY(%(ids)s) AND "
        + IDENTITY_OLD
        + " RETURNING 1)"
        " SELECT count(*) FROM d",
    ),
)

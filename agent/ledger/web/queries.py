"""The review page's queries: each page reads a bounded slice through an index.

Every listing is keyset-paged (`before`: the last id shown) and limited, so a page costs the same
on a ledger of a thousand events or of millions. `PAGE_QUERIES` names each page's main query with
typical parameters: the EXPLAIN test and `bench/web.py` run exactly these.
"""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Row = dict[str, Any]


async def fetch(conn: Conn, sql: LiteralString, params: dict[str, Any] | None = None) -> list[Row]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params or {})
        return await cur.fetchall()


def _where(parts: list[LiteralString]) -> LiteralString:
    return (" WHERE " + " AND ".join(parts)) if parts else ""


def _filtered(f: dict[str, Any], *clauses: tuple[str, LiteralString]) -> list[LiteralString]:
    """The clauses (filter, SQL) whose filter `f` sets, in the order given."""
    return [clause for key, clause in clauses if f.get(key)]


def _review_state(f: dict[str, Any], arrival_id: LiteralString) -> list[LiteralString]:
    """`state` open (no review mark yet) or reviewed (marked), of the arrival `arrival_id` names."""
    marked: LiteralString = "EXISTS (SELECT 1 FROM review_mark m WHERE m.arrival_id = " + arrival_id + ")"
    if f.get("state") == "open":
        return ["NOT " + marked]
    if f.get("state") == "reviewed":
        return [marked]
    return []


# --- overview -------------------------------------------------------------------------------

# The two big tables are counted exactly only while they are small; beyond EXACT_UP_TO rows the
# overview shows the planner's estimate (pg_class.reltuples, kept by ANALYZE/autovacuum), marked as
# such: counting two million arrivals on every page view would cost more than the page itself.
EXACT_UP_TO = 200_000
# The planner's row estimates, summed over a table's leaf partitions (a partitioned table has none of
# its own; a plain table is its own leaf); -1 while no leaf has been analysed.
ESTIMATES: LiteralString = (
    "SELECT t.rel AS relname, coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), -1)::bigint AS n"
    " FROM unnest(ARRAY['canonical_event', 'arrival']) AS t(rel)"
    " CROSS JOIN LATERAL pg_partition_tree(t.rel::regclass) p JOIN pg_class c ON c.oid = p.relid"
    " WHERE p.isleaf GROUP BY t.rel"
)
COUNT_EVENTS: LiteralString = "SELECT count(*) AS n FROM canonical_event"
COUNT_ARRIVALS: LiteralString = "SELECT count(*) AS n FROM arrival"
SUMMARY: LiteralString = (
    "SELECT (SELECT count(*) FROM conflict x WHERE NOT EXISTS"
    "   (SELECT 1 FROM review_mark m WHERE m.arrival_id = x.arrival_id)) AS conflicts_open,"
    " (SELECT count(*) FROM pending p WHERE p.state = 'open' AND NOT EXISTS"
    "   (SELECT 1 FROM review_mark m WHERE m.arrival_id = p.arrival_id)) AS pending_open,"
    " (SELECT count(*) FROM boot) AS boots,"
    " (SELECT count(*) FROM anomaly WHERE kind = 'gap') AS gaps,"
    " (SELECT count(*) FROM notification WHERE state = 'dead') AS notifications_dead,"
    " (SELECT count(*) FROM notification WHERE state = 'pending') AS notifications_pending"
)

# The fleet, keyed by (site, gateway) (operator.md section 3): the last arrival of each pair is a
# skip scan over arrival (gateway, arrival_site(...), received_at), one index probe per pair
# instead of a pass over every arrival. An arrival's site comes from its CloudEvents `source`
# (`arrival_site`, migration 0005); '' when it is not known (an import line, a rejected arrival).
# A status record names its site. A status record is heard at its own time (`reported_at`), never
# later than the ledger received it: a broker's retained copy delivered again on a new
# subscription is an old record and says nothing about the gateway now.
_SITE: LiteralString = "arrival_site(a.via, a.kind, a.source)"
FLEET: LiteralString = (
    "WITH RECURSIVE g AS ("
    " (SELECT a.gateway, " + _SITE + " AS site FROM arrival a ORDER BY a.gateway, " + _SITE + " LIMIT 1)"
    " UNION ALL"
    " SELECT n.gateway, n.site FROM g CROSS JOIN LATERAL"
    " (SELECT a.gateway, " + _SITE + " AS site FROM arrival a"
    "   WHERE (a.gateway, " + _SITE + ") > (g.gateway, g.site)"
    "   ORDER BY a.gateway, " + _SITE + " LIMIT 1) n),"
    " last AS (SELECT g.site, g.gateway, (SELECT max(a.received_at) FROM arrival a"
    "   WHERE a.gateway = g.gateway AND " + _SITE + " = g.site) AS last_arrival FROM g)"
    " SELECT coalesce(s.site, last.site) AS site, coalesce(s.gateway, last.gateway) AS gateway,"
    " last.last_arrival, s.agent_version,"
    " s.reported_at, least(s.reported_at, s.received_at) AS status_heard_at, s.via AS status_via, s.status,"
    " extract(epoch FROM now() - greatest(least(s.reported_at, s.received_at), last.last_arrival))"
    " AS silent_s,"
    " extract(epoch FROM s.reported_at - s.received_at) AS clock_ahead_s"
    " FROM last FULL JOIN gateway_status s ON s.site = last.site AND s.gateway = last.gateway"
    " ORDER BY 1, 2"
)

# --- events ---------------------------------------------------------------------------------

_EVENT_COLUMNS: LiteralString = (
    "c.id, c.source, c.transition_id, c.boot_id, c.source_ts, c.first_gateway, c.created_at,"
    " (SELECT count(*) FROM arrival a2 WHERE a2.canonical_id = c.id) AS arrivals,"
    " EXISTS (SELECT 1 FROM conflict x WHERE x.canonical_id = c.id) AS conflicted"
)


def events_sql(f: dict[str, Any]) -> LiteralString:
    """Canonical events, newest first; with `gateway`, the events of that gateway's latest arrivals."""
    where = _filtered(
        f,
        ("source", "c.source = %(source)s"),
        ("transition", "c.transition_id = %(transition)s"),
        ("boot", "c.boot_id = %(boot)s"),
        ("since", "c.source_ts >= %(since)s"),
        ("until", "c.source_ts < %(until)s"),
    )
    if f.get("gateway"):
        where.append("a.gateway = %(gateway)s")
        if f.get("before") and f.get("before_at"):
            where.append(
                "a.received_at <= %(before_at)s AND (a.received_at, a.id) < (%(before_at)s, %(before)s)"
            )
        return (
            "SELECT a.id AS arrival_id, a.received_at, " + _EVENT_COLUMNS + " FROM arrival a"
            " JOIN canonical_event c ON c.id = a.canonical_id" + _where(where) + " ORDER BY"
            " a.received_at DESC, a.id DESC LIMIT %(limit)s"
        )
    if f.get("before"):
        where.append("c.id < %(before)s")
    return (
        "SELECT "
        + _EVENT_COLUMNS
        + " FROM canonical_event c"
        + _where(where)
        + " ORDER BY c.id DESC LIMIT %(limit)s"
    )


EVENT: LiteralString = (
    "SELECT c.id, c.source, c.transition_id, c.boot_id, c.source_ts, c.payload, c.payload_hash,"
    " c.inserted_arrival_at, c.first_gateway, c.created_at FROM canonical_event c WHERE c.id = %(id)s"
)
EVENT_ARRIVALS: LiteralString = (
    "SELECT a.id, a.decision, a.gateway, a.via, a.attempt, a.replayed, a.gateway_arrival_at,"
    " a.received_at, a.payload_hash, a.reason, a.line FROM arrival a WHERE a.canonical_id = %(id)s"
    " ORDER BY a.id LIMIT 1000"
)
EVENT_NOTIFICATIONS: LiteralString = (
    "SELECT id, kind, state, attempts, max_attempts, last_error, sent_at, visible_at, idempotency_key"
    " FROM notification WHERE canonical_id = %(id)s ORDER BY kind"
)
EVENT_CONFLICTS: LiteralString = (
    "SELECT x.arrival_id, x.payload, x.payload_hash, x.source_ts FROM conflict x"
    " WHERE x.canonical_id = %(id)s ORDER BY x.arrival_id"
)

# --- conflicts ------------------------------------------------------------------------------


def conflicts_sql(f: dict[str, Any]) -> LiteralString:
    where = _review_state(f, "x.arrival_id") + _filtered(
        f,
        ("source", "c.source = %(source)s"),
        ("gateway", "a.gateway = %(gateway)s"),
        ("before", "x.arrival_id < %(before)s"),
    )
    return (
        "SELECT x.arrival_id, x.canonical_id, c.source, c.transition_id, c.boot_id,"
        " c.payload AS canonical_payload, c.payload_hash AS canonical_hash, c.source_ts AS canonical_ts,"
        " c.first_gateway AS canonical_gateway, c.inserted_arrival_at AS canonical_arrival_at,"
        " x.payload AS conflicting_payload, x.payload_hash AS conflicting_hash,"
        " x.source_ts AS conflicting_ts, a.gateway AS conflicting_gateway,"
        " a.gateway_arrival_at AS conflicting_arrival_at, a.via"
        " FROM conflict x JOIN canonical_event c ON c.id = x.canonical_id"
        " JOIN arrival a ON a.id = x.arrival_id"
        + _where(where)
        + " ORDER BY x.arrival_id DESC LIMIT %(limit)s"
    )


# --- pending --------------------------------------------------------------------------------


def pending_sql(f: dict[str, Any]) -> LiteralString:
    where = _review_state(f, "p.arrival_id") + _filtered(
        f,
        ("source", "a.source = %(source)s"),
        ("gateway", "a.gateway = %(gateway)s"),
        ("before", "p.arrival_id < %(before)s"),
    )
    return (
        "SELECT a.id AS arrival_id, a.source, a.transition_id, a.boot_id, a.source_ts,"
        " a.gateway_arrival_at, a.received_at, a.gateway, a.via, a.line, a.reason, a.raw"
        " FROM pending p JOIN arrival a ON a.id = p.arrival_id"
        + _where(where)
        + " ORDER BY p.arrival_id DESC LIMIT %(limit)s"
    )


# --- gaps and boots -------------------------------------------------------------------------

DEVICES: LiteralString = (
    "SELECT device, count(*) AS boots, max(first_arrival) AS last_boot FROM boot"
    " GROUP BY device ORDER BY device LIMIT %(limit)s"
)
DEVICE_BOOTS: LiteralString = (
    "SELECT 'boot' AS what, first_arrival AS at, boot_id, previous_boot_id, live, evidence,"
    " NULL::text AS kind, NULL::text AS from_value, NULL::text AS to_value, device AS source FROM boot"
    " WHERE device = %(device)s ORDER BY first_arrival DESC LIMIT %(limit)s"
)
# Gaps and overruns of every channel of the controller (`<device>/<channel>`) or of the device itself.
DEVICE_ANOMALIES: LiteralString = (
    "SELECT kind AS what, detected_at AS at, boot_id, NULL::text AS previous_boot_id, NULL::boolean AS live,"
    " evidence, kind, from_value, to_value, source FROM anomaly"
    " WHERE (source = %(device)s OR starts_with(source, %(prefix)s))"
    " ORDER BY detected_at DESC LIMIT %(limit)s"
)

# --- notifications --------------------------------------------------------------------------


def notifications_sql(f: dict[str, Any]) -> LiteralString:
    where = _filtered(
        f, ("state", "n.state = %(state)s"), ("kind", "n.kind = %(kind)s"), ("before", "n.id < %(before)s")
    )
    return (
        "SELECT n.id, n.canonical_id, n.kind, n.url, n.state, n.attempts, n.max_attempts, n.last_error,"
        " n.sent_at, n.visible_at, n.created_at, n.idempotency_key FROM notification n"
        + _where(where)
        + " ORDER BY n.id DESC LIMIT %(limit)s"
    )


# Pending and dead rows are few (an index range each); sent rows are nearly all of a big outbox,
# so beyond EXACT_UP_TO rows their count is the estimate of the table minus the other two.
NOTIFICATION_COUNTS: LiteralString = (
    "SELECT (SELECT count(*) FROM notification WHERE state = 'pending') AS pending,"
    " (SELECT count(*) FROM notification WHERE state = 'dead') AS dead,"
    " (SELECT reltuples::bigint FROM pg_class WHERE oid = 'notification'::regclass) AS estimate"
)
COUNT_SENT: LiteralString = "SELECT count(*) AS n FROM notification WHERE state = 'sent'"


# Each page's main query with typical parameters (the EXPLAIN test and the bench use these).
def page_queries(sample: dict[str, Any]) -> dict[str, tuple[LiteralString, dict[str, Any]]]:
    lim = {"limit": 50}
    return {
        "overview-fleet": (FLEET, {}),
        "events": (events_sql({}), lim),
        "events-source": (events_sql({"source": 1}), {**lim, "source": sample["source"]}),
        "events-gateway": (events_sql({"gateway": 1}), {**lim, "gateway": sample["gateway"]}),
        "events-time": (
            events_sql({"since": 1, "until": 1}),
            {**lim, "since": sample["since"], "until": sample["until"]},
        ),
        "event": (EVENT, {"id": sample["canonical_id"]}),
        "event-arrivals": (EVENT_ARRIVALS, {"id": sample["canonical_id"]}),
        "event-notifications": (EVENT_NOTIFICATIONS, {"id": sample["canonical_id"]}),
        "conflicts": (conflicts_sql({"state": "open"}), lim),
        "pending": (pending_sql({"state": "open"}), lim),
        "notifications-dead": (notifications_sql({"state": "dead"}), {**lim, "state": "dead"}),
        "notifications": (notifications_sql({}), lim),
    }

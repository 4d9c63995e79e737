"""A big ledger made inside PostgreSQL (generate_series, no row crosses the wire): `events`
canonical events over 500 devices and 20 gateways, two arrivals each (one per 1,000 a conflict),
one identity-incomplete arrival per 1,000 events on the pending list, a notification per two
events (1 % dead), boots and gaps, status records, and review marks on a third of the conflicts.
Then VACUUM (ANALYZE), as autovacuum leaves a long-lived ledger: the planner sees the sizes
and index-only scans need no heap visit. Used by the EXPLAIN test and bench/web.py."""

from __future__ import annotations

from typing import Any

T0 = "2026-01-01T00:00:00Z"

FILL = [
    """INSERT INTO canonical_event (source, transition_id, boot_id, source_ts, payload, payload_hash,
         inserted_arrival_at, first_gateway, created_at)
       SELECT 'plant/DEV-' || (g %% 500) || '/Trip', 'T' || g, 'B' || (g %% 7),
              %(t0)s::timestamptz + g * interval '1 second', '{"state":"Trip","n":' || g || '}', md5(g::text),
              %(t0)s::timestamptz + g * interval '1 second', 'gw-' || (g %% 20),
              %(t0)s::timestamptz + g * interval '1 second'
       FROM generate_series(1, %(n)s) g""",
    """INSERT INTO arrival (kind, decision, canonical_id, source, transition_id, boot_id, source_ts,
         payload_hash, gateway, gateway_arrival_at, attempt, replayed, received_at, via, raw, arrival_key)
       SELECT 'transition',
              CASE WHEN k = 0 THEN 'inserted' WHEN g %% 1000 = 0 THEN 'conflict' ELSE 'duplicate' END,
              g, 'plant/DEV-' || (g %% 500) || '/Trip', 'T' || g, 'B' || (g %% 7),
              %(t0)s::timestamptz + g * interval '1 second', md5(g::text), 'gw-' || ((g + k) %% 20),
              %(t0)s::timestamptz + g * interval '1 second' + k * interval '5 ms', 1, false,
              %(t0)s::timestamptz + g * interval '1 second' + k * interval '7 ms', 'mqtt',
              convert_to('{"id":"' || g || '"}', 'UTF8'), sha256(convert_to(g || '/' || k, 'UTF8'))
       FROM generate_series(1, %(n)s) g CROSS JOIN generate_series(0, 1) k ORDER BY g, k""",
    """INSERT INTO arrival (kind, decision, source, transition_id, source_ts, reason, gateway,
         gateway_arrival_at, received_at, via, raw, ce_id, arrival_key)
       SELECT 'identity_incomplete', 'identity_incomplete', 'plant/DEV-' || (g %% 500) || '/Trip', 'T' || g,
              %(t0)s::timestamptz + g * interval '1 second', 'no boot id: the controller gives none',
              'gw-' || (g %% 20), %(t0)s::timestamptz + g * interval '1 second',
              %(t0)s::timestamptz + g * interval '1 second', 'http', convert_to('{"raw":' || g || '}', 'UTF8'),
              'ii-' || g, sha256(convert_to('ii/' || g, 'UTF8'))
       FROM generate_series(1000, %(n)s, 1000) g""",
    """INSERT INTO conflict (arrival_id, canonical_id, payload, payload_hash, source_ts)
       SELECT 2 * g, g, '{"state":"Trip","n":' || g || ',"severity":"Low"}', md5('c' || g),
              %(t0)s::timestamptz + g * interval '1 second'
       FROM generate_series(1000, %(n)s, 1000) g""",
    """INSERT INTO pending (arrival_id, source, ce_id)
       SELECT id, source, ce_id FROM arrival WHERE id > 2 * %(n)s""",
    """INSERT INTO notification (canonical_id, kind, url, idempotency_key, state, attempts, max_attempts,
         last_error, visible_at, sent_at)
       SELECT g, 'trip-webhook', 'http://127.0.0.1:9/notify', md5('n' || g),
              CASE WHEN g %% 200 = 0 THEN 'dead' WHEN g %% 50 = 0 THEN 'pending' ELSE 'sent' END,
              1, 5, CASE WHEN g %% 200 = 0 THEN 'HTTP 500 from the receiver' END,
              %(t0)s::timestamptz + g * interval '1 second',
              CASE WHEN g %% 50 <> 0 THEN %(t0)s::timestamptz + g * interval '1 second' END
       FROM generate_series(2, %(n)s, 2) g""",
    """INSERT INTO boot (device, boot_id, previous_boot_id, first_arrival, live, evidence)
       SELECT 'plant/DEV-' || d, 'B' || b, CASE WHEN b > 0 THEN 'B' || (b - 1) END,
              %(t0)s::timestamptz + b * interval '1 day', true, '{}'
       FROM generate_series(0, 499) d CROSS JOIN generate_series(0, 6) b""",
    """INSERT INTO anomaly (source, ce_id, boot_id, kind, from_value, to_value, detected_at, evidence)
       SELECT 'plant/DEV-' || (g %% 500) || '/Trip', 'gap-' || g, 'B' || (g %% 7), 'gap', g::text, (g + 3)::text,
              %(t0)s::timestamptz + g * interval '1 minute', '{}'
       FROM generate_series(1, greatest(%(n)s / 100, 10)) g""",
    """INSERT INTO gateway_status (site, gateway, agent_version, reported_at, received_at, via, status)
       SELECT 'plant', 'gw-' || k, '0.1.0', now(), now(), 'mqtt',
              jsonb_build_object('site', 'plant', 'gateway', 'gw-' || k, 'upstreams',
                jsonb_build_object('ledger', jsonb_build_object('backlog', k, 'oldest_pending_age_s', k)))
       FROM generate_series(0, 19) k""",
    """INSERT INTO review_mark (arrival_id, kind, note, marked_by)
       SELECT 2 * g, 'conflict', 'reviewed in the bench', 'bench' FROM generate_series(3000, %(n)s, 3000) g""",
]


def fill(conn: Any, events: int) -> None:
    """Fill a migrated, empty ledger (a psycopg sync connection), then VACUUM (ANALYZE) it."""
    params = {"n": events, "t0": T0}
    for sql in FILL:
        conn.execute(sql, params)
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM (ANALYZE)")  # the steady state autovacuum keeps: statistics and visibility map
    conn.autocommit = False


def sample(conn: Any) -> dict[str, Any]:
    """Typical parameters for the page queries on this ledger."""
    return {
        "source": "plant/DEV-123/Trip",
        "gateway": "gw-7",
        "since": "2026-01-02T00:00:00Z",
        "until": "2026-01-02T01:00:00Z",
        "canonical_id": 4000,
    }

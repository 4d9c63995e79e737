"""Every page's main query reads through an index on a big ledger: EXPLAIN shows no sequential
scan of the big tables (canonical_event, arrival, notification).

The ledger is made inside PostgreSQL (tests/ledger/bigledger.py). CI uses 100,000 events and
200,000 arrivals (a few seconds); EDGE_WEB_EXPLAIN_EVENTS=1000000 checks the issue's size (a
million events, two million arrivals) by hand. Beyond a few thousand rows the planner's choices
for these LIMITed, keyset-paged queries no longer change with the size.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import bigledger
import pgcluster
import psycopg
import pytest

from agent.ledger.web import queries

BIG = {"canonical_event", "arrival", "notification"}
EVENTS = int(os.environ.get("EDGE_WEB_EXPLAIN_EVENTS", "100000"))


def big_table(relation: str | None) -> str | None:
    """The big table a relation is, or is a partition of (`arrival_default`, `notification_20261201`)."""
    for table in BIG:
        if relation is not None and (relation == table or relation.startswith(table + "_")):
            return table
    return None


def seq_scans(plan: dict[str, Any]) -> list[str]:
    found = []
    table = big_table(plan.get("Relation Name"))
    if plan.get("Node Type") == "Seq Scan" and table is not None:
        found.append(table)
    for child in plan.get("Plans", []):
        found += seq_scans(child)
    return found


@pytest.fixture(scope="module")
def big(pg_cluster: pgcluster.Cluster) -> str:
    name = "big_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE ledger_template")
    dsn = pg_cluster.dsn(name)
    with psycopg.connect(dsn) as conn:
        bigledger.fill(conn, EVENTS)
    return dsn


def test_the_seq_scan_finder_can_fail(big: str) -> None:
    with psycopg.connect(big) as conn:
        (plan,) = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT * FROM arrival WHERE reason LIKE '%x'"
        ).fetchone()  # type: ignore[misc]
    assert seq_scans(plan[0]["Plan"]) == ["arrival"]


def test_every_page_query_uses_an_index_on_a_big_ledger(big: str) -> None:
    with psycopg.connect(big) as conn:
        sample = bigledger.sample(conn)
        extra = {
            "overview-summary": (queries.SUMMARY, {}),
            "overview-estimates": (queries.ESTIMATES, {}),
            "notification-counts": (queries.NOTIFICATION_COUNTS, {}),
            "conflicts-reviewed": (queries.conflicts_sql({"state": "reviewed"}), {"limit": 50}),
            "pending-gateway": (queries.pending_sql({"gateway": 1}), {"limit": 50, "gateway": "gw-3"}),
            "events-paged": (queries.events_sql({"before": 1}), {"limit": 50, "before": EVENTS // 2}),
            "event-conflicts": (queries.EVENT_CONFLICTS, {"id": 4000}),
        }
        bad = {}
        for name, (sql, params) in {**queries.page_queries(sample), **extra}.items():
            row = conn.execute(b"EXPLAIN (FORMAT JSON) " + sql.encode(), params).fetchone()  # type: ignore[arg-type]
            assert row is not None
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            scans = seq_scans(plan[0]["Plan"])
            if scans:
                bad[name] = scans
    assert not bad, f"sequential scans of big tables: {bad}"

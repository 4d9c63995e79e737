"""The ledger's Prometheus endpoint (operator.md section 2; `metrics: {listen: 127.0.0.1:9109}`).

Two kinds of figures:
* counted in this process as batches commit (`Writer.record` calls `committed` / `failed`):
  arrivals by decision and via, batch commit latency, batches that did not commit and why,
  acknowledgements withheld (arrivals of those batches) and whether the intake withholds now;
* read from the database at scrape time (a few indexed queries on a connection of its own):
  notifications by state and the oldest due one's age, the last arrival and status of each
  gateway (labelled `site` and `gateway`: the fleet is keyed by both; `site` empty when not
  known), the conflicts and pending arrivals open, the replication state this server reports;
* retention (`agent.ledger.retention_metrics`): table sizes, the oldest row a prune could take,
  rows pruned and archived, the last prune, identities and `beyond_horizon` arrivals;
* the writer's failover figures (`agent.ledger.failover.GAUGES`: synchronous standby seen,
  batches refused for want of one, outages, batches run again), read at each scrape.
Names start with `edge_ledger_`; the gateway's start with `edge_agent_`.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agent.core.contract import Decision
from agent.core.decide import Outcome
from agent.ledger import failover, retention_metrics
from agent.ledger.arrivals import VIAS, Arrival
from agent.ledger.errors import LedgerUnavailable

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)

ARRIVALS = Counter(
    "edge_ledger_arrivals", "Arrivals committed, by decision and via", ["decision", "via"], registry=REGISTRY
)
BATCH_SECONDS = Histogram(
    "edge_ledger_batch_commit_seconds",
    "Time to arbitrate and commit one batch",
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
BATCH_FAILURES = Counter(
    "edge_ledger_batch_failures",
    "Batches that did not commit, by reason; nothing of them acknowledged, their intake retries them",
    ["reason"],
    registry=REGISTRY,
)
ACKS_WITHHELD = Counter(
    "edge_ledger_acks_withheld",
    "Arrivals whose acknowledgement was withheld because their batch did not commit",
    registry=REGISTRY,
)
WITHHOLDING = Gauge(
    "edge_ledger_withholding",
    "1 while the last batch did not commit (acknowledgements withheld)",
    registry=REGISTRY,
)
# Every series a rule or a panel reads exists from the start at 0 (a labelled counter has no
# series until its first increment, and a panel would say "No data", a rule see nothing): every
# decision by every way in, and the batch failure the ledger knows (the database unavailable).
for _decision in Decision:
    for _via in VIAS:
        ARRIVALS.labels(_decision.value, _via)
BATCH_FAILURES.labels(LedgerUnavailable.__name__)
LAST_COMMIT = Gauge(
    "edge_ledger_last_commit_timestamp_seconds", "Unix time of the last committed batch", registry=REGISTRY
)

DB_UP = Gauge("edge_ledger_database_up", "1 when the scrape's queries answered", registry=REGISTRY)
NOTIFICATIONS = Gauge("edge_ledger_notifications", "Notification rows by state", ["state"], registry=REGISTRY)
OLDEST_DUE = Gauge(
    "edge_ledger_notification_oldest_due_age_seconds",
    "Age of the oldest pending notification that is due (0 when none)",
    registry=REGISTRY,
)
GATEWAY_LAST_ARRIVAL = Gauge(
    "edge_ledger_gateway_last_arrival_timestamp_seconds",
    "Unix time of the last arrival from each gateway (the ledger's clock)",
    ["site", "gateway"],
    registry=REGISTRY,
)
GATEWAY_LAST_STATUS = Gauge(
    "edge_ledger_gateway_last_status_timestamp_seconds",
    "Unix time the ledger received each gateway's last status record",
    ["site", "gateway"],
    registry=REGISTRY,
)
GATEWAY_LAST_HEARD = Gauge(
    "edge_ledger_gateway_last_heard_timestamp_seconds",
    "Unix time of the later of each gateway's last arrival and last status record",
    ["site", "gateway"],
    registry=REGISTRY,
)
OPEN = Gauge(
    "edge_ledger_open", "Conflicts and pending arrivals with no review mark", ["kind"], registry=REGISTRY
)
STANDBYS = Gauge(
    "edge_ledger_standbys",
    "Standbys streaming from this server, by sync_state",
    ["sync_state"],
    registry=REGISTRY,
)
SYNC_NAMES = Gauge(
    "edge_ledger_synchronous_standby_names_set",
    "1 when the server has synchronous_standby_names set (commits wait for a standby)",
    registry=REGISTRY,
)
CONFIG_INFO = Gauge(
    "edge_ledger_config_info", "1: the ledger.yaml in force, by hash", ["hash"], registry=REGISTRY
)
CONFIG_LOADED = Gauge(
    "edge_ledger_config_loaded_timestamp_seconds",
    "When the ledger.yaml in force was loaded (the start or the last reload applied)",
    registry=REGISTRY,
)
CONFIG_RELOADS = Counter(
    "edge_ledger_config_reloads", "Reloads (SIGHUP) by result", ["result"], registry=REGISTRY
)
CONFIG_RELOAD_OK = Gauge(
    "edge_ledger_config_last_reload_successful",
    "0 when the last reload was invalid (the ledger.yaml in force is the older one)",
    registry=REGISTRY,
)
for _result in ("applied", "invalid", "failed"):
    CONFIG_RELOADS.labels(_result)
CONFIG_RELOAD_OK.set(1)


def config_loaded(file_hash: str, result: str | None) -> None:
    """The configuration in force (`result` None: the start; else a reload's result)."""
    if result is not None:
        CONFIG_RELOADS.labels(result).inc()
        CONFIG_RELOAD_OK.set(1 if result == "applied" else 0)
    if result in (None, "applied"):
        CONFIG_INFO.clear()
        CONFIG_INFO.labels(file_hash).set(1)
        CONFIG_LOADED.set_to_current_time()


class _FailoverCollector:
    """The writer's failover figures (agent.ledger.failover.GAUGES), read at each scrape."""

    def collect(self) -> Iterator[Metric]:
        for name, value in failover.GAUGES.values().items():
            if name.endswith("_total"):
                counter = CounterMetricFamily(name.removesuffix("_total"), _FAILOVER_HELP[name])
                counter.add_metric([], value)
                yield counter
            else:
                yield GaugeMetricFamily(name, _FAILOVER_HELP[name], value=value)


_FAILOVER_HELP = {
    "edge_ledger_sync_standby_ok": "1 while the last check saw a synchronous standby streaming",
    "edge_ledger_sync_standby_refusals_total": "Batches refused (require_sync_standby) for want of a"
    " synchronous standby",
    "edge_ledger_database_outages_total": "Times the database became unavailable to the writer",
    "edge_ledger_batches_rerun_total": "Batches run again after an unknown or failed outcome",
}
REGISTRY.register(_FailoverCollector())
for _gauge in retention_metrics.GAUGES:
    REGISTRY.register(_gauge)


def committed(batch: Sequence[Arrival], outcomes: Sequence[Outcome], seconds: float) -> None:
    # Counted per (decision, via) first: a labelled child's lookup and increment take a lock
    # each, and a batch has a thousand arrivals but a few such pairs.
    counts = collections.Counter((oc.decision, arr.via) for arr, oc in zip(batch, outcomes, strict=True))
    for (decision, via), n in counts.items():
        ARRIVALS.labels(decision.value, via).inc(n)
    BATCH_SECONDS.observe(seconds)
    WITHHOLDING.set(0)
    LAST_COMMIT.set(time.time())


def failed(batch: Sequence[Arrival], reason: str) -> None:
    BATCH_FAILURES.labels(reason).inc()
    ACKS_WITHHELD.inc(len(batch))
    WITHHOLDING.set(1)


SCRAPE_SQL = {
    "notifications": "SELECT s.state, (SELECT count(*) FROM notification n WHERE n.state = s.state)"
    " FROM (VALUES ('pending'), ('sent'), ('dead')) s(state)",
    "oldest_due": "SELECT coalesce(extract(epoch FROM now() - min(visible_at)), 0) FROM notification"
    " WHERE state = 'pending' AND visible_at <= now()",
    "open": "SELECT (SELECT count(*) FROM conflict x WHERE x.state = 'open' AND NOT EXISTS"
    " (SELECT 1 FROM review_mark m WHERE m.arrival_id = x.arrival_id)),"
    " (SELECT count(*) FROM pending p WHERE p.state = 'open' AND NOT EXISTS"
    " (SELECT 1 FROM review_mark m WHERE m.arrival_id = p.arrival_id))",
    "standbys": "SELECT sync_state, count(*) FROM pg_stat_replication GROUP BY sync_state",
    "sync_names": "SELECT current_setting('synchronous_standby_names') <> ''",
}


async def refresh(conn: Any) -> None:
    """Read the database's figures into the gauges (one read-only transaction)."""
    from agent.ledger.web import queries

    cur = await conn.execute(SCRAPE_SQL["notifications"])
    for state, n in await cur.fetchall():
        NOTIFICATIONS.labels(state).set(n)
    cur = await conn.execute(SCRAPE_SQL["oldest_due"])
    OLDEST_DUE.set(float((await cur.fetchone())[0]))
    cur = await conn.execute(SCRAPE_SQL["open"])
    conflicts, pending = await cur.fetchone()
    OPEN.labels("conflict").set(conflicts)
    OPEN.labels("pending").set(pending)
    GATEWAY_LAST_ARRIVAL.clear()
    GATEWAY_LAST_STATUS.clear()
    GATEWAY_LAST_HEARD.clear()
    for g in await queries.fetch(conn, queries.FLEET):
        key = (g["site"], g["gateway"])
        heard = [t for t in (g["last_arrival"], g["status_heard_at"]) if t is not None]
        if heard:
            GATEWAY_LAST_HEARD.labels(*key).set(max(heard).timestamp())
        if g["last_arrival"] is not None:
            GATEWAY_LAST_ARRIVAL.labels(*key).set(g["last_arrival"].timestamp())
        if g["status_heard_at"] is not None:
            GATEWAY_LAST_STATUS.labels(*key).set(g["status_heard_at"].timestamp())
    STANDBYS.clear()
    for state in ("sync", "quorum", "potential", "async"):
        STANDBYS.labels(state).set(0)
    cur = await conn.execute(SCRAPE_SQL["standbys"])
    for state, n in await cur.fetchall():
        STANDBYS.labels(str(state)).set(n)
    cur = await conn.execute(SCRAPE_SQL["sync_names"])
    SYNC_NAMES.set(1 if (await cur.fetchone())[0] else 0)
    await retention_metrics.refresh(conn)


def make_app(pool: Any) -> web.Application:
    """`GET /metrics`: the counters, and the database's figures read now (`pool`: web.pool.Pool)."""
    # Imported here: the writer counts into this module, and an MQTT-only ledger needs no aiohttp.
    from aiohttp import web

    async def metrics(_request: web.Request) -> web.Response:
        try:
            async with pool.reading() as conn:
                await refresh(conn)
            DB_UP.set(1)
        except Exception as exc:  # the endpoint answers while PostgreSQL is away: that is when it matters
            log.debug("metrics: database figures not read: %s", exc)
            DB_UP.set(0)
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app

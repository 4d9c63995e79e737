"""Optional Prometheus endpoint (off by default; `metrics: {listen: "127.0.0.1:9108"}`).
Reads only the snapshot the status writer hands it: never the store, never a live object.

The exporter serves from its own thread; it reads a snapshot dict that the service's status
loop replaces every few seconds (one assignment, so a scrape never sees half an update).
Counts are kept apart as everywhere: polls, read errors, decisions by kind (arrivals),
boots, gaps and anomalies, backlog, delivery attempts, dead letters, store size, the
failures and restarts of each supervised task, and what a salvage of a damaged store took
and could not read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agent.core.contract import Decision
from agent.core.timestamps import parse_timestamp

log = logging.getLogger(__name__)


class SnapshotCollector(Collector):
    """Turns the service's latest snapshot into metric families at scrape time."""

    def __init__(self) -> None:
        self.snapshot: dict[str, Any] = {}

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot  # one read: a scrape sees one snapshot
        yield from _connections(snap)
        yield from _recording(snap)
        yield from _upstreams(snap)
        yield from _sparkplug(snap)
        yield from _tasks(snap)
        yield from _salvage(snap)
        yield from _storage(snap)
        yield from _config(snap)
        yield GaugeMetricFamily(
            "edge_agent_store_bytes", "Database file + WAL", value=snap.get("store_bytes", 0)
        )
        if snap.get("store_room") is not None:
            yield GaugeMetricFamily(
                "edge_agent_store_room_bytes",
                "Bytes the store may still grow: the smaller of the disk's free room and max_size's",
                value=snap["store_room"],
            )


def _connections(snap: dict[str, Any]) -> Iterator[Metric]:
    """Polls, read errors and up/down per device connection."""
    polls = CounterMetricFamily("edge_agent_polls", "Successful polls", labels=["device", "connection"])
    errors = CounterMetricFamily("edge_agent_read_errors", "Failed reads", labels=["device", "connection"])
    up = GaugeMetricFamily(
        "edge_agent_connection_up", "1 when the last poll answered", labels=["device", "connection"]
    )
    missed = CounterMetricFamily(
        "edge_agent_ticks_missed",
        "Poll ticks that passed without an answer of their own (slow reads or a link down)",
        labels=["device", "connection"],
    )
    for c in snap.get("connections", []):
        labels = [c["device"], c["receiver"]]
        polls.add_metric(labels, c["polls"])
        errors.add_metric(labels, c["read_errors"])
        up.add_metric(labels, 1.0 if c["state"] == "up" else 0.0)
        missed.add_metric(labels, c.get("ticks_missed", 0))
    yield from (polls, errors, up, missed)


def _recording(snap: dict[str, Any]) -> Iterator[Metric]:
    """Decisions by kind, boot sightings, anomalies and failed commits since start."""
    decisions = CounterMetricFamily(
        "edge_agent_decisions", "Arrivals by decision since start", labels=["decision"]
    )
    counted = snap.get("decisions", {})
    for decision in sorted({*(d.value for d in Decision), *counted}):  # every decision from 0 on
        decisions.add_metric([decision], counted.get(decision, 0))
    yield decisions
    rec = snap.get("recorder", {})
    for name, key, text in (
        ("edge_agent_boot_sightings", "boots", "Boot ids read from controllers since start"),
        ("edge_agent_anomalies", "anomalies", "Gap, wrap, reset and overrun records since start"),
        ("edge_agent_store_write_failures", "store_errors", "Failed store commits (disk or quota full)"),
    ):
        yield CounterMetricFamily(name, text, value=rec.get(key, 0))


def _storage(snap: dict[str, Any]) -> Iterator[Metric]:
    """What the process wrote to storage (flash wear), its commits, and the budget when set."""
    figures = snap.get("storage") or {}
    if figures.get("written_bytes") is not None:
        yield CounterMetricFamily(
            "edge_agent_storage_written_bytes",
            "Bytes this process caused to be written to storage (/proc/self/io write_bytes)",
            value=figures["written_bytes"],
        )
    yield CounterMetricFamily(
        "edge_agent_store_commits",
        "Write transactions committed to the store",
        value=figures.get("commits", 0),
    )
    if figures.get("budget_bytes_per_s") is not None:
        yield GaugeMetricFamily(
            "edge_agent_write_budget_bytes_per_second",
            "store.write_budget: the bytes per second the process may write to storage",
            value=figures["budget_bytes_per_s"],
        )


RELOAD_RESULTS = ("applied", "invalid", "refused", "failed")


def _config(snap: dict[str, Any]) -> Iterator[Metric]:
    """The configuration in force (its fingerprint as a label), when it was loaded, and the reloads
    by result (each from 0): a failed reload keeps the old configuration running, which is easy to
    miss, so the last one's success is a gauge of its own for an alert."""
    if snap.get("config_hash"):
        info = GaugeMetricFamily("edge_agent_config_info", "1: the configuration in force", labels=["hash"])
        info.add_metric([str(snap["config_hash"])], 1)
        yield info
    if snap.get("config_loaded_at"):
        yield GaugeMetricFamily(
            "edge_agent_config_loaded_timestamp_seconds",
            "When the configuration in force was loaded (the start or the last reload applied)",
            value=parse_timestamp(snap["config_loaded_at"], "config_loaded_at").timestamp(),
        )
    counts = snap.get("reloads") or {}
    reloads = CounterMetricFamily(
        "edge_agent_config_reloads", "Reloads asked for, by result", labels=["result"]
    )
    for result in RELOAD_RESULTS:
        reloads.add_metric([result], counts.get(result, 0))
    yield reloads
    last = (snap.get("last_reload") or {}).get("result", "applied")
    yield GaugeMetricFamily(
        "edge_agent_config_last_reload_successful",
        "0 when the last reload was invalid or refused (the configuration in force is the older one)",
        value=1 if last == "applied" else 0,
    )


def _salvage(snap: dict[str, Any]) -> Iterator[Metric]:
    """What a new store took from a damaged one at this start (all 0 when none was damaged)."""
    got = snap.get("salvage") or {}
    for name, key, text in (
        (
            "edge_agent_salvaged_outbox_rows",
            "outbox_rows",
            "Outbox rows a salvage of a damaged store put in the new one",
        ),
        (
            "edge_agent_salvage_unreadable_rows",
            "unreadable_rows",
            "Rows of a damaged store that could not be read",
        ),
        (
            "edge_agent_salvage_outbox_rows_lost",
            "outbox_rows_lost",
            "Undelivered outbox rows of a damaged store whose record could not be taken over",
        ),
    ):
        yield GaugeMetricFamily(name, text, value=got.get(key, 0))


def _upstreams(snap: dict[str, Any]) -> Iterator[Metric]:
    """Backlog, dead letters and delivery attempts per upstream."""
    backlog = GaugeMetricFamily("edge_agent_backlog", "Outbox rows not yet delivered", labels=["upstream"])
    dead = GaugeMetricFamily("edge_agent_dead_letters", "Outbox rows rejected upstream", labels=["upstream"])
    attempts = CounterMetricFamily(
        "edge_agent_delivery_attempts", "Upstream sends, retries included", labels=["upstream"]
    )
    oldest = GaugeMetricFamily(
        "edge_agent_oldest_pending_age_seconds",
        "Age of the oldest outbox row not yet delivered (0 when none)",
        labels=["upstream"],
    )
    awaiting = GaugeMetricFamily(
        "edge_agent_awaiting_receipt",
        "Outbox rows the broker acknowledged and the ledger's receipt has not confirmed yet"
        " (upstreams with receipts: true)",
        labels=["upstream"],
    )
    oldest_awaiting = GaugeMetricFamily(
        "edge_agent_oldest_awaiting_receipt_age_seconds",
        "Seconds since the oldest row awaiting its receipt was acknowledged by the broker (0 when none)",
        labels=["upstream"],
    )
    now = time.time()
    for u in snap.get("outbox", []):
        backlog.add_metric([u["upstream"]], u["pending"])
        dead.add_metric([u["upstream"]], u["rejected"])
        attempts.add_metric([u["upstream"]], u["attempts"])
        oldest.add_metric([u["upstream"]], pending_age_s(u.get("oldest_pending_at"), now))
        awaiting.add_metric([u["upstream"]], u.get("awaiting_receipt", 0))
        oldest_awaiting.add_metric([u["upstream"]], pending_age_s(u.get("oldest_awaiting_at"), now))
    yield from (backlog, dead, attempts, oldest, awaiting, oldest_awaiting)


def pending_age_s(oldest_pending_at: str | None, now: float) -> float:
    """Seconds since a time (the oldest pending row's record, the oldest row awaiting its receipt's
    PUBACK): 0 when none or unreadable."""
    if not oldest_pending_at:
        return 0.0
    try:
        at = datetime.fromisoformat(oldest_pending_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - at)


def _sparkplug(snap: dict[str, Any]) -> Iterator[Metric]:
    """The Sparkplug sessions: connected, primary host online, bdSeq, rows waiting for their window."""
    lab = ["upstream"]
    connected = GaugeMetricFamily(
        "edge_agent_sparkplug_connected", "Sparkplug session up (1) or not", labels=lab
    )
    host = GaugeMetricFamily(
        "edge_agent_sparkplug_primary_host_online", "The primary host's last STATE said online", labels=lab
    )
    bd_seq = GaugeMetricFamily(
        "edge_agent_sparkplug_bdseq", "bdSeq of the current or last CONNECT", labels=lab
    )
    window = GaugeMetricFamily(
        "edge_agent_sparkplug_rows_in_window",
        "Rows published and waiting for 2 x keepalive unbroken before they count as delivered",
        labels=lab,
    )
    for name, u in (snap.get("upstreams") or {}).items():
        if u.get("kind") != "sparkplug":
            continue
        connected.add_metric([name], 1.0 if u.get("connected") else 0.0)
        if u.get("primary_host_online") is not None:
            host.add_metric([name], 1.0 if u["primary_host_online"] else 0.0)
        if u.get("bd_seq") is not None:
            bd_seq.add_metric([name], u["bd_seq"])
        window.add_metric([name], u.get("in_window", 0))
    yield from (connected, host, bd_seq, window)


def _tasks(snap: dict[str, Any]) -> Iterator[Metric]:
    """Unexpected failures and restarts per supervised task (device connection, forwarder, recorder)."""
    failures = CounterMetricFamily(
        "edge_agent_task_failures", "Unexpected exceptions of a supervised task", labels=["task"]
    )
    restarts = CounterMetricFamily(
        "edge_agent_task_restarts", "Restarts of a supervised task", labels=["task"]
    )
    for t in snap.get("tasks", []):
        failures.add_metric([t["name"]], t["failures"])
        restarts.add_metric([t["name"]], t["restarts"])
    yield from (failures, restarts)


def serve(listen: str, collector: SnapshotCollector) -> None:
    """Start the exporter on `host:port` (the config loader keeps it on a loopback address by default)."""
    from prometheus_client import start_http_server

    host, _, port = listen.rpartition(":")
    registry = CollectorRegistry()
    registry.register(collector)
    start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    log.info("metrics endpoint listening on http://%s:%s/metrics", host or "127.0.0.1", port)

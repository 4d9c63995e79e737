"""The writer's failover figures reach the ledger's Prometheus endpoint at each scrape."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="the ledger extra (psycopg) is not installed")

from prometheus_client import generate_latest

from agent.ledger import failover, metrics


def _scrape() -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.REGISTRY).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_the_failover_gauges_are_exported_as_they_are_now(monkeypatch: pytest.MonkeyPatch) -> None:
    gauges = failover.Gauges()
    gauges.sync_standby_ok = 1.0
    gauges.outages = 3.0
    gauges.sync_standby_refusals = 7.0
    gauges.batches_rerun = 2.0
    monkeypatch.setattr(failover, "GAUGES", gauges)
    got = _scrape()
    assert got["edge_ledger_sync_standby_ok"] == 1.0
    assert got["edge_ledger_database_outages_total"] == 3.0
    assert got["edge_ledger_sync_standby_refusals_total"] == 7.0
    assert got["edge_ledger_batches_rerun_total"] == 2.0
    gauges.sync_standby_ok = 0.0
    assert _scrape()["edge_ledger_sync_standby_ok"] == 0.0

"""monitoring/: the alert rules pass promtool (syntax and unit tests of every alert), each alert
has a runbook, and every metric a dashboard or a rule names is exported by a running gateway or a
running ledger (both scraped here, with a real broker and PostgreSQL), while the gateway's status
record reaches the ledger's `gateway_status` and never its event tables."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from mosquitto import MOSQUITTO, Broker
from pgcluster import free_port

ROOT = Path(__file__).parents[2]
MON = ROOT / "monitoring"
PROMTOOL = shutil.which("promtool")
NAME = re.compile(r"\bedge_(?:agent|ledger)_[a-z0-9_]+")


def alerts() -> list[str]:
    names = []
    for f in sorted((MON / "rules").glob("*.rules.yml")):
        for group in yaml.safe_load(f.read_text())["groups"]:
            names += [r["alert"] for r in group["rules"] if "alert" in r]
    return names


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is missing: apt-get install prometheus")
def test_promtool_checks_the_rules_and_every_alert_fires_in_a_unit_test() -> None:
    rules = sorted(str(p) for p in (MON / "rules").glob("*.rules.yml"))
    tests = sorted(str(p) for p in (MON / "tests").glob("*.test.yml"))
    assert rules and tests
    for cmd in (["check", "rules", *rules], ["test", "rules", *tests]):
        out = subprocess.run([PROMTOOL, *cmd], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
    firing: set[str] = set()
    for t in tests:
        for case in yaml.safe_load(Path(t).read_text())["tests"]:
            firing |= {a["alertname"] for a in case.get("alert_rule_test", []) if a.get("exp_alerts")}
    assert set(alerts()) == firing, "every alert needs a unit test where it fires"


def test_every_alert_has_a_runbook_section_in_operations_md() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    headings = {h.strip().lower() for h in re.findall(r"^#{2,4} (\w+)\s*$", doc, re.M)}
    for name in alerts():
        assert name.lower() in headings, f"docs/operations.md has no section '### {name}'"


def named_metrics() -> dict[str, str]:
    """Every edge_* metric name a dashboard or a rule uses -> the file naming it."""
    out: dict[str, str] = {}
    for f in [*(MON / "dashboards").glob("*.json"), *(MON / "rules").glob("*.yml")]:
        for name in NAME.findall(f.read_text()):
            out.setdefault(name, f.name)
    return out


def exported(text: str) -> set[str]:
    """Sample names an exposition serves: a name with HELP and TYPE but no sample does not count
    (a panel on it says "No data", a rule on it sees nothing)."""
    return set(re.findall(r"^([a-z_][a-z0-9_]*)(?:\{| )", text, re.M))


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        body: bytes = resp.read()
    return body.decode()


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
@pytest.mark.timeout(90)
async def test_every_named_metric_is_exported_and_the_status_record_reaches_the_overview(
    tmp_path: Path, ledger_dsn: str
) -> None:
    from agent.config.loader import load
    from agent.ledger import service
    from agent.ledger.config import LedgerConfig, MqttIntake
    from agent.ledger.config_views import MetricsSettings
    from agent.service.run import Service
    from devices.controller import ChannelSpec, Controller
    from devices.plant import Plant

    broker = await asyncio.to_thread(Broker, tmp_path)
    gw_port, ledger_port = free_port(), free_port()
    stop_ledger, stop_gateway = asyncio.Event(), asyncio.Event()
    cfg = LedgerConfig(
        dsn=ledger_dsn,
        password_file=None,
        mqtt=MqttIntake("127.0.0.1", broker.port, "+/events/#", "ledger", "ledger-mon"),
        http=None,
        notify=(),
        file="(test)",
        metrics=MetricsSettings("127.0.0.1", ledger_port),
    )
    ledger = asyncio.create_task(service.run(cfg, stop=stop_ledger))
    try:
        async with Plant([Controller("PUMP-07", [ChannelSpec("Trip")])], opcua_port=None) as plant:
            doc: dict[str, Any] = {
                "site": "plant",
                "gateway": "gw-mon",
                "status_every": "500ms",
                "store": {"path": str(tmp_path / "g.db"), "write_budget": "20GB/day"},
                "metrics": {"listen": f"127.0.0.1:{gw_port}"},
                "upstreams": [{"name": "ledger", "mqtt": {"url": f"mqtt://127.0.0.1:{broker.port}"}}],
                "devices": plant.device_configs(),
            }
            doc["devices"][0]["poll"] = "100ms"
            (tmp_path / "g.yaml").write_text(yaml.safe_dump(doc))
            gateway = Service(load(tmp_path / "g.yaml"), status_interval_s=0.2)
            running = asyncio.create_task(gateway.run(stop_gateway))
            await gateway.ready.wait()
            await plant.transition("PUMP-07", "Trip")
            status: Any = None
            for _ in range(150):
                await asyncio.sleep(0.2)
                async with await psycopg.AsyncConnection.connect(ledger_dsn) as conn:
                    cur = await conn.execute("SELECT status FROM gateway_status WHERE gateway = 'gw-mon'")
                    found = await cur.fetchone()
                    cur = await conn.execute("SELECT count(*) FROM canonical_event")
                    events = (await cur.fetchone() or [0])[0]
                # the first record may predate the first poll (link "connecting"): wait for one after it
                if (
                    found is not None
                    and events >= 1
                    and any(d["link"] == "up" for d in found[0]["devices"].values())
                ):
                    status = found[0]
                    break
            gw_text = await asyncio.to_thread(scrape, gw_port)
            ledger_text = await asyncio.to_thread(scrape, ledger_port)
            stop_gateway.set()
            await running
    finally:
        stop_ledger.set()
        await ledger
        broker.stop()
    assert status is not None, (
        "no status record of gw-mon with its link up reached gateway_status (or no event)"
    )
    assert status["upstreams"]["ledger"]["backlog"] >= 0 and status["store_room_bytes"] > 0
    assert any(d["link"] == "up" for d in status["devices"].values())
    async with await psycopg.AsyncConnection.connect(ledger_dsn) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM arrival WHERE raw::text LIKE '%gateway_status%' OR decision = 'rejected'"
        )
        assert (await cur.fetchone() or [1])[0] == 0  # the status records never became arrivals
    names = exported(gw_text) | exported(ledger_text)
    # One series per Sparkplug upstream: this gateway has none (tests/unit/test_sparkplug_status.py
    # has them with one). Every other name must have a sample, 0 included.
    names |= {n for n in named_metrics() if n.startswith("edge_agent_sparkplug_")}
    missing = {n: f for n, f in named_metrics().items() if n not in names}
    assert not missing, f"named in monitoring/ but no sample from either (HELP/TYPE only): {missing}"
    for name in (
        "edge_agent_oldest_pending_age_seconds",
        "edge_agent_store_room_bytes",
        "edge_agent_ticks_missed_total",
    ):
        assert re.search(rf"^{name}\{{", gw_text, re.M) or re.search(rf"^{name} ", gw_text, re.M), name
    # The fleet is keyed by (site, gateway): the status record names its site, an arrival's site is
    # its CloudEvents source's (arrival_site, migration 0005).
    for kind in ("status", "arrival", "heard"):
        series = f'edge_ledger_gateway_last_{kind}_timestamp_seconds{{gateway="gw-mon",site="plant"}}'
        assert series in ledger_text, series
    # Counters with labels have their series from the start (a ratio panel shows 0, not "No data");
    # the ledger's registry is this process's, which other tests of the worker may have counted in.
    assert 'edge_agent_decisions_total{decision="conflict"} 0.0' in gw_text
    for series in (
        'edge_ledger_arrivals_total{decision="conflict",via="http"}',
        'edge_ledger_batch_failures_total{reason="LedgerUnavailable"}',
    ):
        assert re.search("^" + re.escape(series) + r" \d", ledger_text, re.M), series
    assert re.search(
        r'^edge_ledger_arrivals_total\{decision="inserted",via="mqtt"\} [1-9]', ledger_text, re.M
    )

"""A real Prometheus sees a gateway process die: `EdgeAgentDown` (`up == 0`) fires for it, where
the alerts computed from its own series would only go stale and resolve (issue 36).

Prometheus (Debian's 2.42 here; the test skips without it) scrapes a real `edge-agent run` every
second and evaluates `monitoring/rules/edge-agent.rules.yml` every second, the rule's `for: 2m`
shortened to 2 s in the copy it loads (the two minutes themselves are `promtool test rules`'
subject); the process is then killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_process import start_agent

from agent.cli.ledger.throwaway import free_port, listening

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)"),
]


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())["data"]


async def until(check: Any, timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        try:
            got = await asyncio.to_thread(check)
        except OSError:
            got = None
        if got:
            return got
        await asyncio.sleep(0.5)
    raise AssertionError(what)


async def test_a_killed_gateway_fires_edge_agent_down_in_a_real_prometheus(tmp_path: Path) -> None:
    metrics_port, prom_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "site": "plant-1",
                "gateway": "gw-dies",
                "store": {"path": str(tmp_path / "events.db")},
                "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
                "devices": [  # a PLC that is not there: the agent runs and says so
                    {
                        "name": "PUMP-07",
                        "connections": [{"modbus": {"host": "127.0.0.1", "port": free_port()}}],
                        "channels": {
                            "Trip": {
                                "transition_id": {"register": 10, "type": "uint32"},
                                "state": {"register": 12},
                            }
                        },
                    }
                ],
            }
        )
    )
    rules = (ROOT / "monitoring" / "rules" / "edge-agent.rules.yml").read_text()
    down = rules.index("alert: EdgeAgentDown")
    cut = rules.index("for: 2m", down)
    (tmp_path / "rules.yml").write_text(rules[:cut] + "for: 2s" + rules[cut + len("for: 2m") :])
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(tmp_path / "rules.yml")],
                "scrape_configs": [
                    {"job_name": "edge-agent", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
                ],
            }
        )
    )
    agent = await start_agent(config, tmp_path / "agent.log")
    prom = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    instance = f"127.0.0.1:{metrics_port}"
    try:
        await until(lambda: listening(prom_port), 30, "prometheus did not listen")

        def up() -> float | None:
            found = get(prom_port, "/api/v1/query?query=up")["result"]
            values = [float(r["value"][1]) for r in found if r["metric"]["instance"] == instance]
            return values[0] if values else None

        await until(lambda: up() == 1.0, 30, "the gateway was never scraped up")
        firing = get(prom_port, "/api/v1/alerts")["alerts"]
        assert not [a for a in firing if a["labels"]["alertname"] == "EdgeAgentDown"], firing
        agent.send_signal(signal.SIGKILL)
        await agent.wait()

        def down_alert() -> list[dict[str, Any]]:
            alerts = get(prom_port, "/api/v1/alerts")["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "EdgeAgentDown"
                and a["labels"]["instance"] == instance
                and a["state"] == "firing"
            ]

        fired = await until(down_alert, 40, "EdgeAgentDown never fired for the killed gateway")
        assert fired[0]["labels"]["severity"] == "critical"
        assert fired[0]["annotations"]["runbook"] == "docs/operations.md#edgeagentdown"
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
        prom.terminate()
        prom.wait(timeout=20)

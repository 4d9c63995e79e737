"""`status` and the metrics show a Sparkplug session: connected, primary host, bdSeq, rows in window."""

from __future__ import annotations

from dataclasses import asdict

from prometheus_client import CollectorRegistry, generate_latest

from agent.cli.service import _sparkplug_line
from agent.service.metrics import SnapshotCollector
from agent.sparkplug.live import SparkplugState


def test_metrics_and_status_line_of_a_sparkplug_session() -> None:
    st = SparkplugState("ignition", primary_host="scada-1", connected=True, primary_host_online=False, bd_seq=7, in_window=42)
    c = SnapshotCollector()
    c.snapshot = {"upstreams": {"ignition": asdict(st), "central": {"up": True}}}
    reg = CollectorRegistry()
    reg.register(c)
    text = generate_latest(reg).decode()
    assert 'edge_agent_sparkplug_connected{upstream="ignition"} 1.0' in text
    assert 'edge_agent_sparkplug_primary_host_online{upstream="ignition"} 0.0' in text
    assert 'edge_agent_sparkplug_bdseq{upstream="ignition"} 7.0' in text
    assert 'edge_agent_sparkplug_rows_in_window{upstream="ignition"} 42.0' in text
    assert "central" not in text.split("edge_agent_sparkplug_connected")[1].split("#")[0]
    line = _sparkplug_line("ignition", asdict(st))
    assert "Sparkplug connected, bdSeq 7, primary host scada-1 OFFLINE, 42 rows waiting" in line

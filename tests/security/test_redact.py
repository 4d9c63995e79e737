"""Secrets never in logs: URLs are shown with their password and query values masked."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from agent.cli.main import cli
from agent.config.advice import is_loopback
from agent.config.upstreams import HttpUpstream
from agent.core.redact import mask_url
from agent.sinks.encode import Event
from agent.sinks.http import HttpSink


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mqtts://gw:s3cret@broker:8883", "mqtts://gw:***@broker:8883"),
        ("https://historian/ingest?token=s3cret&site=x", "https://historian/ingest?token=***&site=***"),
        ("https://historian/ingest?flag", "https://historian/ingest?flag"),
        ("https://[::1]:8443/i?sig=abc", "https://[::1]:8443/i?sig=***"),
        ("mqtt://gw@broker", "mqtt://gw@broker"),
        ("https://historian/ingest", "https://historian/ingest"),
        ("not a url", "not a url"),
    ],
)
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@given(
    secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=20),
    where=st.sampled_from(["password", "query"]),
)
def test_no_secret_survives_masking(secret: str, where: str) -> None:
    url = f"https://gw:{secret}@h:1/p" if where == "password" else f"https://h/p?a=1&token={secret}"
    assert secret not in mask_url(url).replace("***", "")


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:9108", True),
        (":9108", True),
        ("localhost:9108", True),
        ("[::1]:9108", True),
        ("127.0.0.5:9108", True),
        ("0.0.0.0:9108", False),
        ("[::]:9108", False),
        ("10.10.0.2:9108", False),
        ("gateway.plant:9108", False),
    ],
)
def test_what_counts_as_loopback_for_the_metrics_endpoint(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


async def test_a_failed_delivery_names_the_url_without_its_query_token(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = HttpUpstream("historian", f"http://127.0.0.1:{port}/ingest?token=hunter2", connect_timeout_s=1)
    sink = HttpSink(up)
    try:
        event = Event(1, "plant-1/P/T", "e1", "t", "transition", "P", "T", b"{}")
        outcomes = await sink.publish([event])
    finally:
        await sink.close()
    assert outcomes and "hunter2" not in outcomes[0].reason and "token=***" in outcomes[0].reason


@pytest.mark.parametrize(
    ("metrics", "warned"),
    [
        pytest.param({"listen": "0.0.0.0:9108"}, True, id="every interface, no reason: warned"),
        pytest.param({"listen": "0.0.0.0:9108", "reason": "scraped by 10.0.0.2"}, False, id="a reason given"),
        pytest.param({"listen": "127.0.0.1:9108"}, False, id="loopback"),
    ],
)
def test_check_warns_when_metrics_listen_beyond_loopback_without_a_reason(
    tmp_path: Path, metrics: dict[str, str], warned: bool
) -> None:
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(tmp_path / "events.db")},
        "metrics": metrics,
        "devices": [
            {
                "name": "P",
                "connections": [{"modbus": {"host": "127.0.0.1"}}],
                "channels": {
                    "T": {"transition_id": {"register": 10, "type": "uint32"}, "state": {"register": 12}}
                },
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert ("metrics.listen '0.0.0.0:9108' serves the metrics beyond this machine" in result.stderr) is warned


def test_a_user_or_password_in_an_opc_ua_endpoint_is_a_config_problem(tmp_path: Path) -> None:
    """The endpoint is part of every receiver name, log line and arrival: no secret may ride in it."""
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(tmp_path / "events.db")},
        "devices": [
            {
                "name": "P",
                "connections": [
                    {"opcua": {"endpoint": "opc.tcp://op:s3cret@10.0.0.8:4840", "security": {"policy": None}}}
                ],
                "channels": {"T": {"transition_id": {"node": "ns=2;s=T"}, "state": {"node": "ns=2;s=S"}}},
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", "-c", str(path)])
    assert result.exit_code == 78
    assert (
        "opcua.endpoint: must not carry a user or password; use username and password_file" in result.stderr
    )

"""Upstream settings: defaults are valid, and every problem is named with its field."""

from __future__ import annotations

import pytest

from agent.config.upstreams import Backoff, HttpUpstream, MqttUpstream, Upstream


@pytest.mark.parametrize(
    ("upstream", "problem"),
    [
        pytest.param(MqttUpstream("central", "mqtt://127.0.0.1:1883"), None, id="mqtt defaults are valid"),
        pytest.param(HttpUpstream("hist", "https://h.example/ingest"), None, id="http defaults are valid"),
        pytest.param(MqttUpstream("c", "tcp://h"), "url:", id="an mqtt url needs the mqtt or mqtts scheme"),
        pytest.param(MqttUpstream("c", "mqtt://h", qos=0), "qos:", id="qos 0 has no acknowledgement"),
        pytest.param(
            MqttUpstream("c", "mqtt://h", topic="{site}/{plc}"),
            "unknown placeholder {plc}",
            id="an unknown topic placeholder is named",
        ),
        pytest.param(MqttUpstream("c", "mqtt://h", topic="a/#"), "wildcards", id="a wildcard topic"),
        pytest.param(
            MqttUpstream("c", "mqtt://h", password_file="/p"),
            "needs a username",
            id="a password file needs a user name",
        ),
        pytest.param(
            MqttUpstream("c", "mqtts://h", cert_file="/c"),
            "cert_file/key_file",
            id="a client certificate needs its key",
        ),
        pytest.param(HttpUpstream("h", "ftp://h"), "url:", id="an http url needs http or https"),
        pytest.param(HttpUpstream("h", "http://h", batch_size=0), "batch_size:", id="an empty batch"),
        pytest.param(
            HttpUpstream("h", "http://h", backfill="some"),
            "backfill:",  # type: ignore[arg-type]
            id="backfill is none or all",
        ),
        pytest.param(
            HttpUpstream("h", "http://h", backoff=Backoff(5, 1)), "backoff:", id="a cap below the first delay"
        ),
        pytest.param(HttpUpstream("a/b", "http://h"), "name:", id="a name with a slash"),
    ],
)
def test_problems(upstream: Upstream, problem: str | None) -> None:
    found = upstream.problems()
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found

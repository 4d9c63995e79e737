"""`edge-agent ledger run -c ledger.yaml` as a real process: config errors with file:line and exit
78; intake over HTTP; SIGTERM drains and exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pgcluster import free_port

from agent.ledger import config

CMD = [sys.executable, "-m", "agent", "ledger"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("dsn: x\n", "neither `mqtt` nor `http`", id="no intake"),
        pytest.param(
            "http: {listen: nowhere}\n", ":1: http.listen: 'nowhere' must be host:port", id="bad listen"
        ),
        pytest.param(
            "http: {listen: '127.0.0.1:1'}\nmqtt: {host: h}\n",
            ":2: mqtt.client_id: missing",
            id="mqtt without a client id",
        ),
        pytest.param(
            "http: {listen: '127.0.0.1:1'}\nspeed: 3\n", ":2: speed: unknown key", id="a misspelt key"
        ),
        pytest.param("mqtt: [1, 2]\n", ":1: mqtt: must be a mapping, not a list", id="a list for a section"),
        pytest.param(
            "http: {listen: '127.0.0.1:1'}\nnotify: {kind: a}\n",
            ":2: notify: must be a list, not a mapping",
            id="one rule without the list",
        ),
        pytest.param("", ":1: neither `mqtt` nor `http`", id="an empty file"),
        pytest.param("http: {listen: '127.0.0.1:0'}\n", "with a port 1..65535", id="port 0"),
        pytest.param("- a\n- b\n", ":1: must be a mapping, not a list", id="a list at the top"),
        pytest.param(
            "mqtt:\n  client_id: a\n  port: 70000\n", ":3: mqtt.port: must be <= 65535", id="a port too high"
        ),
        pytest.param("http: {listen: '127.0.0.1:1'\n", ":2: not valid YAML", id="not YAML"),
        pytest.param(
            "http: {listen: '127.0.0.1:1'}\nnotify:\n  - {kind: k, url: ftp://x}\n",
            "notify[0].url: 'ftp://x' must be an http:// or https:// URL",
            id="a notify rule with a bad url",
        ),
        pytest.param(
            "http: {listen: '127.0.0.1:1'}\nrequire_sync_standby: yes please\n",
            ":2: require_sync_standby:",
            id="require_sync_standby not a boolean",
        ),
    ],
)
def test_config_errors_name_file_and_line_and_exit_78(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text(text)
    with pytest.raises(config.ConfigProblems) as info:
        config.load(f)
    assert expected in str(info.value) and str(f) in str(info.value)


def test_require_sync_standby_is_read_and_off_by_default(tmp_path: Path) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text("http: {listen: '127.0.0.1:1'}\n")
    assert config.load(f).require_sync_standby is False
    f.write_text("http: {listen: '127.0.0.1:1'}\nrequire_sync_standby: true\n")
    assert config.load(f).require_sync_standby is True


def test_run_with_a_bad_config_lists_every_problem_and_exits_78(tmp_path: Path) -> None:
    f = tmp_path / "ledger.yaml"
    f.write_text("http: {listen: nowhere}\nspeed: 3\n")
    proc = subprocess.run([*CMD, "run", "-c", str(f)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78
    assert f"{f}:1: http.listen" in proc.stderr and f"{f}:2: speed: unknown key" in proc.stderr


def test_run_takes_events_over_http_and_sigterm_exits_0(tmp_path: Path, ledger_dsn: str) -> None:
    port = free_port()
    f = tmp_path / "ledger.yaml"
    f.write_text(f"dsn: '{ledger_dsn}'\nhttp: {{listen: '127.0.0.1:{port}'}}\n")
    proc = subprocess.Popen(
        [*CMD, "run", "-c", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        event = {
            "specversion": "1.0",
            "id": "B1:T1",
            "source": "site/P/Trip",
            "type": "io.edgeagent.transition",
            "bootid": "B1",
            "transitionid": "T1",
            "gateway": "gw",
            "data": {"state": "Trip"},
        }
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/",
            data=json.dumps([event]).encode(),
            headers={"Content-Type": "application/cloudevents-batch+json"},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    answer = json.loads(resp.read())
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert answer["results"][0]["decision"] == "inserted"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(
        subprocess.run(
            [*CMD, "--dsn", ledger_dsn, "report", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert [(a["gateway"], a["via"]) for a in report["arrivals"]] == [("gw", "http")]


def test_the_example_config_loads() -> None:
    cfg = config.load(Path(__file__).parents[2] / "ledger.example.yaml", check_files=False)
    assert cfg.mqtt is not None and cfg.mqtt.subscription == "+/events/#"
    assert cfg.http is not None and cfg.http.port == 8088
    (rule,) = cfg.notify
    assert rule.matches("io.edgeagent.transition", "plant-1/PUMP-07/Trip", {})
    assert not rule.matches("io.edgeagent.transition", "plant-1/PUMP-07/OverTemp", {})


@pytest.mark.parametrize(
    "command",
    [
        ["migrate"],
        ["check"],
        ["import"],
        ["run"],
        ["report"],
        ["notifications"],
        ["notifications", "retry"],
        ["demo"],
        ["web"],
        ["review", "mark"],
    ],
    ids=lambda c: " ".join(c),
)
def test_every_ledger_command_has_an_example_and_its_exit_codes_in_its_help(command: list[str]) -> None:
    from click.testing import CliRunner

    from agent.cli.main import cli

    result = CliRunner().invoke(
        cli, ["ledger", *command, "--help"], prog_name="edge-agent", terminal_width=120
    )
    assert result.exit_code == 0, result.output
    text = result.output
    examples = [line for line in text.splitlines() if line.strip().startswith("edge-agent ledger ")]
    assert any(" ".join(command) in line for line in examples), text
    assert "Exit 0" in text and "74" in text, text


def test_the_ledger_groups_help_names_the_connection_and_every_exit_code() -> None:
    from click.testing import CliRunner

    from agent.cli.main import cli

    text = CliRunner().invoke(cli, ["ledger", "--help"], prog_name="edge-agent", terminal_width=120).output
    assert "PGHOST" in text and "EDGE_LEDGER_DSN" in text
    for code in ("0 ok", "2 usage", "69 PostgreSQL", "74 the ledger", "78 configuration error"):
        assert code in text, code

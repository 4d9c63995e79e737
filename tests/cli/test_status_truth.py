"""`status` tells the truth: "running" only while the service's process lives and writes its state,
"stopped" at once when the process is gone, "not responding since ..." when it lives but is silent,
error causes in full (wrapped, never cut), and a failing task named. Real `edge-agent run` processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.cli.liveness import NEVER_RAN, NOT_RESPONDING, RUNNING, STOPPED, liveness
from agent.cli.main import cli
from agent.cli.service import status_lines
from agent.service import process

CMD = [sys.executable, "-m", "agent"]
ROOT = Path(__file__).resolve().parents[2]

CONFIG = """site: plant-1
gateway: gw
store:
  path: {store}
devices:
  - name: PUMP-07
    poll: 100ms
    connections: [{{modbus: {{host: 127.0.0.1, port: {port}}}}}]
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 11}}
"""


@pytest.mark.parametrize(
    ("pid", "alive", "at", "age", "state"),
    [
        (None, None, None, None, NEVER_RAN),
        (4242, True, "t", 1.0, RUNNING),
        (4242, True, "t", 29.9, RUNNING),
        (4242, True, "t", 30.0, NOT_RESPONDING),
        (4242, False, "t", 0.5, STOPPED),  # gone is gone, however fresh the last state
        (4242, False, "t", 3600.0, STOPPED),
        (None, None, "t", 1.0, RUNNING),  # a state without a pid: the heartbeat alone decides
        (None, None, "t", 31.0, NOT_RESPONDING),
    ],
)
def test_liveness_from_pid_and_heartbeat(
    pid: int | None, alive: bool | None, at: str | None, age: float | None, state: str
) -> None:
    assert liveness(pid, alive, at, age, stale_after_s=30.0).state == state


def test_the_recorded_process_is_told_apart_from_a_later_one_with_its_pid() -> None:
    me = process.mark()
    assert me["start_ticks"] is not None and me["machine_boot_id"]
    assert process.alive(os.getpid(), me) is True
    assert process.alive(os.getpid(), None) is True  # a state without a mark: the pid alone
    assert process.alive(os.getpid(), {**me, "start_ticks": me["start_ticks"] - 1}) is False  # pid reused
    assert process.alive(os.getpid(), {**me, "machine_boot_id": "another-boot"}) is False  # machine restarted
    assert process.alive(os.getpid(), {**me, "host": "another-gateway"}) is None  # cannot be checked here
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process.alive(child.pid, None) is False
    assert not process.pid_exists(0) and not process.pid_exists(-1)


def _free_port() -> int:
    """A port with nothing listening: the device is unreachable, the service runs on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(config: Path, *extra: str) -> str:
    """`status` run in this process (click's runner) against the real service's store."""
    result = CliRunner().invoke(cli, ["status", "-c", str(config), *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _status_json(config: Path, *extra: str) -> dict[str, Any]:
    return dict(json.loads(_status(config, "--json", *extra)))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=tmp_path / "events.db", port=_free_port()), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen([*CMD, "run", "-c", str(config)], stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:  # until the service has written its live state
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
            if (tmp_path / "events.db").exists():
                found = CliRunner().invoke(cli, ["status", "-c", str(config), "--json"])
                if found.exit_code == 0 and json.loads(found.stdout)["service"] is not None:
                    break
            assert time.monotonic() < deadline, "the service never wrote its state"
            time.sleep(0.2)
        yield proc, config
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(timeout=60)
        log.close()


@pytest.mark.timeout(120)
def test_running_then_not_responding_then_stopped_at_once(
    service: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, config = service
    st = _status_json(config)
    assert st["running"] and st["liveness"]["state"] == RUNNING
    assert st["liveness"]["pid"] == proc.pid
    assert st["service"]["process"]["start_ticks"] == process.start_ticks(proc.pid)
    assert _status(config).startswith("service: running")

    proc.send_signal(signal.SIGSTOP)  # alive, but writes nothing
    try:
        last = _status_json(config)["service"]["updated_at"]
        time.sleep(2.5)
        st = _status_json(config, "--stale-after", "2")
        assert st["liveness"]["state"] == NOT_RESPONDING and not st["running"]
        assert st["service"]["updated_at"] == last
        text = _status(config, "--stale-after", "2")
        assert text.startswith(f"service: NOT RESPONDING since {last} (the process is alive")
    finally:
        proc.send_signal(signal.SIGCONT)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    st = _status_json(config)  # at once: its last state is seconds old, far from any staleness limit
    assert st["service"]["age_s"] < 30
    assert not st["running"] and st["liveness"]["state"] == STOPPED
    text = _status(config)
    assert text.startswith("service: STOPPED (the process is gone; its last state was written at ")
    assert "devices (as last recorded):" in text


CAUSE = (
    "TLS handshake with historian.plant-1.example:8883 failed: certificate verify failed: unable to get "
    "local issuer certificate (the CA in /etc/edge-agent/pki/ca.pem does not sign the broker's chain)"
)


def _rendered(service: dict[str, Any], upstream_error: str | None = None) -> str:
    store = {"path": "x.db", "store_bytes": 10**5, "fs_free_bytes": 8 * 10**10, "days_that_fit": None}
    ups = [
        {
            "upstream": "historian",
            "pending": 3,
            "delivered": 0,
            "rejected": 0,
            "attempts": 4,
            "oldest_pending_at": "2026-04-22T08:00:12.180Z",
            "head_error": upstream_error,
            "last_rejection": None,
        }
    ]
    status = {"service": service, "running": True, "upstreams": ups, "store": store}
    return "\n".join(status_lines(status))


def _live(**extra: Any) -> dict[str, Any]:
    conn = {
        "device": "PUMP-07",
        "receiver": "opcua:opc.tcp://10.0.0.7:4840",
        "state": "unavailable",
        "last_poll_at": None,
        "boot_id": None,
        "polls": 0,
        "read_errors": 3,
        "last_error": CAUSE,
    }
    return {
        "started_at": "2026-04-22T08:00:00.000Z",
        "pid": 4242,
        "config": "/etc/edge-agent/config.yaml",
        "connections": [conn],
        "upstreams": {"historian": {"upstream": "historian", "up": False, "last_error": CAUSE}},
        "recorder": {},
        "updated_at": "2026-04-22T08:00:10.000Z",
        "age_s": 1.0,
        **extra,
    }


def _unwrapped(text: str) -> str:
    return " ".join(text.split())


def _bare(text: str) -> str:
    return "".join(text.split())


def test_causes_are_shown_in_full_and_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    text = _rendered(_live(), upstream_error="HTTP 503 " + "x" * 150)
    assert all(
        len(line) <= 80 for line in text.splitlines() if "last error" in line or line.startswith("    ")
    )
    flat = _bare(text)
    assert _bare(f"PUMP-07 via opcua:opc.tcp://10.0.0.7:4840: last error: {CAUSE}") in flat
    assert _bare(f"historian: last error: {CAUSE}") in flat
    assert _bare("historian: oldest pending row's last error: HTTP 503 " + "x" * 150) in flat
    assert "…" not in text


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"failing_task": "forwarder:historian"}, "FAILING TASK: forwarder:historian"),
        (
            {"failing_task": {"name": "poller:PUMP-07", "error": "KeyError: 'ns'", "restarts": 3}},
            "FAILING TASK: poller:PUMP-07 (restarts 3): KeyError: 'ns'",
        ),
        (
            {
                "tasks": {
                    "recorder": {"state": "running"},
                    "forwarder:mqtt": {"state": "failing", "last_error": "boom"},
                }
            },
            "FAILING TASK: forwarder:mqtt: boom",
        ),
        (  # the supervisor's shape: a list of tasks with state, failures, restarts, last error
            {
                "tasks": [
                    {
                        "name": "recorder",
                        "state": "running",
                        "failures": 0,
                        "restarts": 0,
                        "last_error": None,
                    },
                    {
                        "name": "poller:PUMP-07",
                        "state": "restarting",
                        "failures": 2,
                        "restarts": 1,
                        "last_error": "KeyError: 'ns'",
                    },
                ]
            },
            "FAILING TASK: poller:PUMP-07 (state restarting, failures 2, restarts 1): KeyError: 'ns'",
        ),
        (
            {
                "tasks": [
                    {"name": "mqtt", "state": "running", "failures": 1, "restarts": 1, "last_error": "x"}
                ]
            },
            "task restarted after failing: mqtt (state running, failures 1, restarts 1): x",
        ),
    ],
)
def test_a_failing_task_is_named(extra: dict[str, Any], expected: str) -> None:
    text = _rendered(_live(**extra))
    assert expected in _unwrapped(text)
    assert "recorder" not in text


def test_live_fields_status_does_not_know_are_shown_not_dropped() -> None:
    text = _rendered(_live(salvaged={"rows": 12, "unreadable": 1}))
    assert 'salvaged: {"rows":12,"unreadable":1}' in text


def test_a_state_written_on_another_host_says_so() -> None:
    live = _live(process={"host": "gw-line-2", "machine_boot_id": "b", "start_ticks": 1})
    store = {"path": "x.db", "store_bytes": 10**5, "fs_free_bytes": 8 * 10**10, "days_that_fit": None}
    status = {
        "service": live,
        "running": True,
        "liveness": {"state": RUNNING, "pid": 4242, "pid_alive": None},
        "upstreams": [],
        "store": store,
    }
    first = status_lines(status)[0]
    assert first.startswith("service: running by its last state 1.0 s ago (written on host gw-line-2")

"""The systemd unit: it verifies, and its exposure score stays at or below 2.0."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).parents[2] / "systemd" / "edge-agent.service"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)"
)


def local_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists here (verify checks it)."""
    text = UNIT.read_text().replace("/opt/edge-agent/venv/bin/edge-agent", sys.executable + " -m agent")
    unit = tmp_path / "edge-agent.service"
    unit.write_text(text)
    return unit


def test_unit_verifies(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(local_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "edge-agent.service" in line and "Failed to" not in line
    ]
    assert proc.returncode == 0 or not problems, proc.stdout + proc.stderr


def test_exposure_is_two_or_lower(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(local_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= 2.0, proc.stdout


def test_unit_keeps_the_promises_the_readme_makes() -> None:
    text = UNIT.read_text()
    for line in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "RestartPreventExitStatus=77 78",
        "StateDirectory=edge-agent",
        "ConfigurationDirectory=edge-agent",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=",
        "SystemCallFilter=@system-service",
    ):
        assert line in text, line

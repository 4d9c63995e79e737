"""The ledger's systemd unit: it verifies, its exposure stays at or below 2.0, and it keeps the
promises docs/ledger.md makes (always restarted, no restart on a config error)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).parents[2] / "systemd" / "edge-ledger.service"

needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)"
)


def local_copy(tmp_path: Path) -> Path:
    text = UNIT.read_text().replace("/opt/edge-agent/venv/bin/edge-agent", sys.executable + " -m agent")
    unit = tmp_path / "edge-ledger.service"
    unit.write_text(text)
    return unit


@needs_systemd
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
        if "edge-ledger.service" in line and "Failed to" not in line
    ]
    assert proc.returncode == 0 or not problems, proc.stdout + proc.stderr


@needs_systemd
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


def test_unit_keeps_its_promises() -> None:
    text = UNIT.read_text()
    for line in (
        "Restart=always",
        "RestartPreventExitStatus=78",
        "ledger run -c /etc/edge-ledger/ledger.yaml",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DynamicUser=yes",
    ):
        assert line in text, line

"""What `check` reads of the installed unit: LoadCredential= (with drop-ins and credstores),
the user it runs as, its StateDirectory; and the unit does not restart on 77 or 78."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.context import EX_CONFIG, EX_NOPERM
from agent.config import unit as unit_module
from agent.config.unit import read_unit

SYSTEMD = Path(__file__).parents[2] / "systemd"


def test_the_unit_does_not_restart_on_a_config_error_nor_an_unreadable_file() -> None:
    text = (SYSTEMD / "edge-agent.service").read_text()
    m = re.search(r"^RestartPreventExitStatus=(.*)$", text, re.MULTILINE)
    assert m is not None
    assert {EX_NOPERM, EX_CONFIG} <= {int(x) for x in m.group(1).split()}


def test_the_shipped_unit_runs_as_a_dynamic_user_with_its_state_directory() -> None:
    u = read_unit(str(SYSTEMD / "edge-agent.service"))
    assert u.dynamic_user and u.state_directories == ("edge-agent",) and u.protect_system == "strict"
    assert u.credentials == {}  # they come with the drop-in systemd/credentials.conf


def test_credentials_come_from_the_unit_its_drop_ins_and_the_credstore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "credstore"
    store.mkdir()
    (store / "relative-name").write_text("x")
    monkeypatch.setattr(unit_module, "CREDSTORES", (str(store),))
    monkeypatch.setattr(unit_module, "UNIT_DIRS", ())
    unit = tmp_path / "edge-agent.service"
    unit.write_text(
        "[Unit]\nDescription=x\nLoadCredential=not-service:/nope\n"
        "[Service]\nDynamicUser=yes\nLoadCredential=dropped:/x\nLoadCredential=\n"
        "LoadCredential=abs:/etc/secret\nLoadCredential=rel:relative-name\nLoadCredential=bare\n"
    )
    (tmp_path / "edge-agent.service.d").mkdir()
    (tmp_path / "edge-agent.service.d" / "10-more.conf").write_text(
        "[Service]\n# LoadCredential=commented:/x\nLoadCredential=extra:/srv/extra\nDynamicUser=no\nUser=edge\n"
    )
    u = read_unit(str(unit))
    assert u.credentials == {
        "abs": "/etc/secret",
        "rel": str(store / "relative-name"),
        "bare": str(store / "bare"),
        "extra": "/srv/extra",
    }
    assert not u.dynamic_user and u.user == "edge"  # a later drop-in wins, as in systemd


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_credentials_drop_in_verifies_with_the_unit(tmp_path: Path) -> None:
    """systemd-analyze reads a drop-in only where systemd would: verify the unit with the drop-in's
    lines appended, which is what systemd makes of the two."""
    text = (
        (SYSTEMD / "edge-agent.service")
        .read_text()
        .replace("/opt/edge-agent/venv/bin/edge-agent", sys.executable + " -m agent")
    )
    unit = tmp_path / "edge-agent.service"
    unit.write_text(text + "\n" + (SYSTEMD / "credentials.conf").read_text())
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    said = proc.stdout + proc.stderr
    assert "redential" not in said, said
    assert set(read_unit(str(unit)).credentials) == {
        "mqtt-password",
        "historian-token",
        "opcua-password",
        "opcua-key.pem",
    }

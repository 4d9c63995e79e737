"""`identity: window` channels in the config and in `edge-agent check` (contract section 8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.config import loader as config

CONFIG = """\
site: plant-1
gateway: gw
store:
  path: {db}
  retention: {{arrivals: 1d, payloads: 2d, keys: {keys}}}
devices:
  - name: PUMP-07
    connections: [{{modbus: {{host: 127.0.0.1}}}}]
    poll: 250ms
    boot_id: {{register: 0, type: uint32}}
    channels:
      Trip:
        transition_id: {{register: 10, type: uint32}}
        state: {{register: 12}}
      Coil:
        identity: window
        state: {{register: 13, table: coil, values: {{0: "Off", 1: "On"}}}}
        window: {window}
"""


def write(tmp_path: Path, window: str, keys: str = "400d") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(db=tmp_path / "s.db", window=window, keys=keys), encoding="utf-8")
    return path


def check(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "agent", "check", "-c", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_window_channel_has_no_counter_and_its_window_in_milliseconds(tmp_path: Path) -> None:
    dev = config.load(write(tmp_path, "90s")).devices[0]
    trip, coil = dev.channels
    assert (trip.transition_id is not None, trip.window) == (True, None)
    assert (coil.transition_id, coil.window, coil.window_ms) == (None, 90.0, 90_000)
    assert config.load(write(tmp_path, "90s")).warnings == ()


def test_check_warns_when_the_window_is_under_ten_poll_intervals_and_still_passes(tmp_path: Path) -> None:
    path = write(tmp_path, "2s")
    proc = check(path)
    assert proc.returncode == 0, proc.stderr
    assert (
        f"warning: {path}:18: devices[0].channels.Coil.window: 2s is shorter than 10 poll intervals"
        in proc.stderr
    )


def test_check_refuses_a_window_the_key_horizon_would_forget_with_exit_78(tmp_path: Path) -> None:
    path = write(tmp_path, "30d", keys="30d")
    proc = check(path)
    assert proc.returncode == 78
    assert f"{path}:18: devices[0].channels.Coil.window: 30d must be shorter than the store's key" in (
        proc.stderr
    )

"""`edge-agent run` reads its configuration in a child process (agent.service.config_apart): the same
Config, the same problems with file:line, as the loader in the process."""

from __future__ import annotations

from pathlib import Path

import pytest

import agent.service.config_apart as apart_mod
from agent.config.loader import load
from agent.core.errors import ConfigError
from agent.service.config_apart import load_apart

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_reads_the_same_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # The example names certificate files of a real gateway: checked without them, here and apart.
    monkeypatch.setattr(apart_mod, "load", lambda p: load(p, check_files=False))
    example = ROOT / "config.example.yaml"
    assert load_apart(example) == load(example, check_files=False)


def test_a_bad_file_raises_the_same_problems_apart(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("site: plant-1\ngateway: gw\nstore: {path: x.db}\ndevices:\n  - name: P\n    poll: fast\n")
    with pytest.raises(ConfigError) as here:
        load(bad)
    with pytest.raises(ConfigError) as apart:
        load_apart(bad)
    assert str(apart.value) == str(here.value) and f"{bad}:" in str(apart.value)

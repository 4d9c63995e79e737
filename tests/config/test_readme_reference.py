"""The configuration reference (docs/configuration.md, linked from the README) names every key
the config model accepts.

Keys come from the model itself: the names the loader reads (agent/config/loader.py), the fields of
the upstream and retention settings classes, and every key of config.example.yaml. A key
added to the model without a line in the reference fails here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from agent.config.retention import RetentionSettings
from agent.config.sparkplug import SparkplugUpstream
from agent.config.upstreams import Backoff, HttpUpstream, MqttUpstream

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "docs" / "configuration.md").read_text()  # the README's reference, moved there
USER_NAMED = {"channels", "values", "latched", "fields_named"}  # children of these are names people choose


def model_keys() -> set[str]:
    loader = "".join(p.read_text() for p in (ROOT / "agent" / "config").glob("*.py"))
    keys = set(re.findall(r'\.(?:get|sub|has|raw)\("([a-z_]+)"', loader))
    for cls in (MqttUpstream, HttpUpstream, SparkplugUpstream, Backoff, RetentionSettings):
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            keys.add(f.name.removesuffix("_s"))
    keys -= {"initial_s", "max_s"}
    return keys | {"mqtt", "http", "sparkplug", "modbus", "modbus_rtu", "opcua"}


def example_keys(node: Any, parent: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if parent not in USER_NAMED:
                out.add(str(k))
            out |= example_keys(v, str(k) if parent not in USER_NAMED else "")
    elif isinstance(node, list):
        for v in node:
            out |= example_keys(v, parent)
    return out


def test_every_config_key_is_in_the_readme() -> None:
    example = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    keys = model_keys() | example_keys(example)
    keys -= {"name"} if "`name`" in README else set()
    missing = sorted(k for k in keys if f"`{k}`" not in README)
    assert not missing, f"docs/configuration.md lacks: {missing}"


def test_the_reference_check_can_fail() -> None:
    assert "`no_such_key_anywhere`" not in README
    assert "name" in model_keys() and "retention" in model_keys()

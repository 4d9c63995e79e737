"""The generated Sparkplug module is what the pinned generator writes from the checked-in schema
(agent/sparkplug/proto/regenerate.py): CI fails when sparkplug_b.proto, the generator pin or the
generated files change apart."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from agent.sparkplug.proto import regenerate, sparkplug_b_pb2

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_module_is_what_the_pinned_generator_writes() -> None:
    try:
        stale = regenerate.stale()
    except regenerate.GeneratorMissing as exc:
        if "not installed" in str(exc):
            pytest.skip(f"{exc}: pyproject's dev extra installs it")
        raise
    assert stale == [], f"{stale} differ from the generator's output: python -m agent.sparkplug.proto.regenerate"


def test_the_dev_extra_installs_the_generator_regenerate_pins() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert f"{regenerate.GENERATOR}=={regenerate.GENERATOR_VERSION}" in dev


def test_the_runtime_range_admits_the_gencode() -> None:
    # The gencode asks ValidateProtobufRuntimeVersion for its own version (same major, not older).
    text = (ROOT / "agent/sparkplug/proto/sparkplug_b_pb2.py").read_text()
    major, minor, patch = map(int, re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", text).groups())
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"protobuf>={major}.{minor}.{patch},<{major + 1}" in deps


def test_the_generated_module_is_the_specification_s_schema() -> None:
    d = sparkplug_b_pb2.DESCRIPTOR
    assert (d.name, d.package) == ("sparkplug_b.proto", "org.eclipse.tahu.protobuf")
    metric = sparkplug_b_pb2.Payload.Metric.DESCRIPTOR
    numbers = {f.name: f.number for f in metric.fields}
    assert numbers["is_null"] == 7 and numbers["properties"] == 9 and numbers["string_value"] == 15
    assert sparkplug_b_pb2.DataType.Value("Boolean") == 11 and sparkplug_b_pb2.DataType.Value("DateTimeArray") == 34

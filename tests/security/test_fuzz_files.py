"""Fuzzed import lines and config files: every failure is a clear error with a location, never a
traceback, never a partial config (hypothesis; `load` returns a whole Config or raises)."""

from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import loader as config
from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery

FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
AT = "2026-04-22T08:00:00.000Z"
LOCATION = re.compile(r"^  .+:\d+: ", re.MULTILINE)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
fields = st.sampled_from(["source", "transitionId", "bootId", "sourceTimestamp", "arrivalAt", "payload", "x"])
objects = st.dictionaries(fields, json_values, max_size=7)


@FUZZ
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_any_bytes_are_a_delivery_or_a_rejection_with_a_reason_and_line(raw: bytes) -> None:
    out = parse_delivery(raw, arrival_at=AT, receiver="file:test", line=7)
    assert isinstance(out, Delivery | Rejection)
    if isinstance(out, Rejection):
        assert out.reason and out.line == 7


@FUZZ
@given(obj=objects)
def test_any_json_object_is_a_delivery_or_a_rejection_with_a_reason(obj: dict[str, Any]) -> None:
    raw = json.dumps(obj, allow_nan=True).encode()  # NaN/Infinity tokens too: not JSON, rejected
    out = parse_delivery(raw, arrival_at=AT, receiver="file:test", line=1)
    if isinstance(out, Rejection):
        assert out.reason
    else:
        assert isinstance(out, Delivery) and out.payload_hash


VALID: dict[str, Any] = {
    "site": "plant-1",
    "gateway": "gw-line3",
    "store": {"path": "/var/lib/edge-agent/events.db", "max_size": "2GB"},
    "upstreams": [{"name": "central", "mqtt": {"url": "mqtts://broker:8883", "ca_file": "/etc/ca.crt"}}],
    "devices": [
        {
            "name": "PUMP-07",
            "connections": [
                {"modbus": {"host": "10.0.0.7", "port": 502, "unit": 1, "timeout": "1s"}},
                {"opcua": {"endpoint": "opc.tcp://10.0.0.7:4840", "security": {"policy": "None"}}},
            ],
            "poll": "250ms",
            "namespace": "urn:x",
            "boot_id": {"register": 0, "type": "uint32", "node": "ns=2;s=B"},
            "channels": {
                "Trip": {
                    "transition_id": {"register": 10, "type": "uint32", "node": "ns=2;s=T"},
                    "state": {"register": 12, "values": {0: "Normal", 1: "Trip"}, "node": "ns=2;s=S"},
                }
            },
        }
    ],
}


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = paths(VALID)[1:]
yaml_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=False),
        st.text(max_size=12),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def mutate(doc: dict[str, Any], edits: list[tuple[int, Any, bool]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for index, value, delete in edits:
        where = ALL_PATHS[index % len(ALL_PATHS)]
        parent: Any = out
        try:
            for key in where[:-1]:
                parent = parent[key]
            if delete and isinstance(parent, dict):
                parent.pop(where[-1], None)
            else:
                parent[where[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    return out


def check_load(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            cfg = config.load(path, check_files=False)
        except config.ConfigProblems as exc:
            assert exc.problems, "an error without problems"
            for p in exc.problems:
                assert p.file == str(path) and p.line >= 0 and p.message
            assert len(LOCATION.findall(str(exc))) == len(exc.problems)  # file:line: on every one
            return
        assert isinstance(cfg, config.Config) and cfg.devices  # whole, or not at all


@CONFIGS
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), yaml_values, st.booleans()), min_size=1, max_size=4))
def test_a_mutated_config_loads_whole_or_lists_every_problem_with_file_and_line(
    edits: list[tuple[int, Any, bool]],
) -> None:
    check_load(yaml.safe_dump(mutate(VALID, edits), sort_keys=False))


@CONFIGS
@given(text=st.text(max_size=300))
def test_any_text_as_a_config_file_is_a_config_or_problems_with_a_location(text: str) -> None:
    check_load(text)


def test_the_unmutated_config_used_for_fuzzing_loads() -> None:
    check_load(yaml.safe_dump(VALID, sort_keys=False))

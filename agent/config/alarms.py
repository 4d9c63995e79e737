"""The ``alarms:`` section of an OPC UA device: which condition events to subscribe to and how
their channels are named (contract section 7, docs/alarms.md).

Reads one YAML section into :class:`agent.config.sources.Alarms`; every problem is reported with
file and line by the loader.
"""

from __future__ import annotations

import re
import string
from typing import Any

from agent.config.sources import Alarms
from agent.config.yaml_lines import _int_in, _list, _Section, _text

NODE_ID = re.compile(r"^(ns=\d+;|nsu=[^;]+;)?[isgb]=.+$")
PLACEHOLDERS = ("SourceName", "ConditionName")
CHANNEL = re.compile(r"^[A-Za-z0-9._-]+$")


def _node_id(v: Any) -> str:
    text = _text(v)
    if not NODE_ID.match(text):
        raise ValueError(f"{text!r} is no OPC UA node id (e.g. i=2253 or ns=2;s=PLC)")
    return text


def _template(v: Any) -> str:
    text = _text(v)
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        raise ValueError(f"{text!r} is no template: {exc}") from exc
    unknown = sorted({n for n in names if n not in PLACEHOLDERS})
    if unknown:
        raise ValueError(f"unknown placeholder {{{unknown[0]}}}; use {{SourceName}} and {{ConditionName}}")
    if "ConditionName" not in names:
        raise ValueError(
            "must contain {ConditionName}: one PLC is usually the SourceName of all its alarms, so "
            "SourceName alone would put them all on one channel"
        )
    return text


def _channel(v: Any) -> str:
    text = _text(v)
    if not CHANNEL.match(text):
        raise ValueError(f"{text!r} must be letters, digits, '.', '_' or '-'")
    return text


def _node_ids(v: Any) -> tuple[str, ...]:
    ids = tuple(_node_id(x) for x in _list(v))
    if not ids:
        raise ValueError("needs at least one event type (default: i=2915, AlarmConditionType)")
    return ids


def read_alarms(s: _Section) -> Alarms:
    """The ``alarms:`` section (``alarms: {}`` takes every default)."""
    default: tuple[str, ...] = ("i=2915",)
    types = s.get("types", _node_ids, default)
    out = Alarms(
        notifier=s.get("notifier", _node_id, "i=2253"),
        template=s.get("template", _template, "{SourceName}.{ConditionName}"),
        types=types,
        channel=s.get("channel", _channel, "alarms"),
        queue=s.get("queue", _int_in(10, 100_000), 1000),
    )
    s.finish()
    return out

"""The agent config snippet for simulated devices, so nobody hand-copies register numbers (pure).

One field spec carries the keys of both protocols: Modbus keys (``register``, ``type``,
``values``, ``unit``) and OPC UA keys (``node``); each connection of the device uses the keys
of its own protocol. The shape is documented in ``docs/devices.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from devices.controller import Controller
from devices.modbus_map import RegisterMap
from devices.opcua_nodes import NAMESPACE, NodeLayout


def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge of two field-spec trees; ``b`` adds keys, nested mappings merge."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def device_config(
    controller: Controller,
    *,
    modbus: Mapping[str, Any] | None = None,
    register_map: RegisterMap | None = None,
    opcua: Mapping[str, Any] | None = None,
    nodes: NodeLayout | None = None,
    poll: str = "250ms",
) -> dict[str, Any]:
    """One entry of ``devices:``; ``modbus`` is ``{host, port, unit}``, ``opcua`` ``{endpoint, security}``."""
    connections: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    if modbus is not None and register_map is not None:
        connections.append({"modbus": dict(modbus)})
        fields = merge(fields, register_map.field_specs())
    if opcua is not None and nodes is not None:
        connections.append({"opcua": dict(opcua)})
        fields = merge(fields, nodes.field_specs())
    out: dict[str, Any] = {"name": controller.name, "connections": connections, "poll": poll}
    if opcua is not None:
        out["namespace"] = NAMESPACE
    for key in ("boot_id", "channels", "ring", "events"):
        if key in fields:
            out[key] = fields[key]
    out["ring"] = merge(out.get("ring", {}), {"capacity": {"value": controller.ring_capacity}})
    if register_map is not None:
        out["word_order"] = register_map.word_order
    return out


def config_yaml(devices: list[dict[str, Any]]) -> str:
    """The ``devices:`` section as YAML text, in the key order above."""
    return yaml.safe_dump({"devices": devices}, sort_keys=False, default_flow_style=None, width=110)

"""One OPC UA Read of every node of a device, turned into the parts of a Snapshot.

Holds the sorting of DataValues into good values and per-node errors, and the boot id, channel
and ring reads made from them. It must not open sessions, subscribe, or touch the tracker.

Every value is checked before use (:mod:`agent.sources.opcua.values`): a Bad status or a
refused value fails only its field, and each field's error is logged once per change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.config.sources import Channel, Device
from agent.core.snapshot import ChannelRead, RingItem, RingRead
from agent.sources.base import StateLog
from agent.sources.opcua.events import ua_time
from agent.sources.opcua.values import array_problem, scalar_problem
from agent.sources.readings import BadValue, boot_number, channel_fields, channel_read, ring_item


@dataclass
class NodeValues:
    """One Read by node key: the good values, their source timestamps, the refused nodes' errors."""

    values: dict[str, Any] = field(default_factory=dict)
    stamps: dict[str, Any] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)


def sort_values(dev: Device, keys: list[str], data_values: list[Any]) -> NodeValues:
    """Each DataValue as a good value, or as a Bad status / a refused value of its node."""
    out = NodeValues()
    for key, dv in zip(keys, data_values, strict=True):
        if not dv.StatusCode.is_good():
            out.bad[key] = dv.StatusCode.name
        elif (problem := value_problem(dev, key, dv.Value.Value)) is not None:
            out.bad[key] = f"refused: {problem}"
        else:
            out.values[key] = dv.Value.Value
            out.stamps[key] = dv.SourceTimestamp
    return out


def value_problem(dev: Device, key: str, value: Any) -> str | None:
    ring = dev.ring
    if ring is not None and key.startswith("ring.") and key not in ("ring.head", "ring.capacity"):
        return array_problem(value, ring.slot_count)
    if key == "start_time" and value is not None and not isinstance(value, datetime):
        return f"{type(value).__name__} where a date-time is expected"
    return scalar_problem(value)


def boot_of(dev: Device, read: NodeValues, errors: StateLog) -> tuple[str | None, str | None]:
    """(boot id, why it could not be read) from the boot id node, when one is mapped."""
    if dev.boot_id is None:
        return None, None
    boot, boot_error = None, read.bad.get("boot")
    if boot_error is None and read.values.get("boot") is not None:
        try:
            boot = boot_number(read.values["boot"])
        except BadValue as exc:
            boot_error = f"refused: {exc}"
    errors.set("boot id", f"status {boot_error}" if boot_error else None)
    return boot, boot_error


def channel_of(ch: Channel, read: NodeValues, errors: StateLog) -> ChannelRead:
    """One channel from its nodes' values; a node's Bad status or refusal is the read's error."""
    got: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    problems = []
    for name, f in channel_fields(ch):
        key = f"{ch.name}.{name}"
        if key in read.bad:
            problems.append(f"{f.node}: {read.bad[key]}")
            raw[name] = {"node": f.node, "status": read.bad[key]}
        elif key in read.values:
            got[name] = read.values[key]
            raw[name] = {"node": f.node, "value": read.values[key]}
    if ch.time_from_state and f"{ch.name}.state" in read.stamps:
        got["source_timestamp"] = ua_time(read.stamps[f"{ch.name}.state"])
    if problems:
        raw["error"] = "; ".join(problems)
    result = channel_read(ch, got, raw)
    errors.set(f"channel {ch.name}", result.error)
    errors.set(f"channel {ch.name} values", "; ".join(result.raw.get("flags", ())) or None)
    return result


def ring_of(dev: Device, read: NodeValues, errors: StateLog) -> tuple[RingRead | None, str | None]:
    """(the ring, why it could not be read) from the head, capacity and slot array nodes."""
    ring = dev.ring
    if ring is None:
        return None, None
    failed = [f"{k}: {v}" for k, v in read.bad.items() if k.startswith("ring.")]
    if failed or "ring.head" not in read.values:
        error = "; ".join(failed) or "ring head not read"
        errors.set("ring", error)
        return None, error
    errors.set("ring", None)
    arrays = {name: read.values.get(f"ring.{name}") or [] for name in ring.fields}
    count = min((len(a) for a in arrays.values()), default=0)
    entries: list[RingItem] = []
    for k in range(count):
        item = ring_item(dev, {name: arrays[name][k] for name in arrays})
        if item is not None:
            entries.append(item)
    head, cap = read.values["ring.head"], read.values.get("ring.capacity")
    if not _whole(head) or not (cap is None or _whole(cap)):
        error = f"ring head {head!r} or capacity {cap!r} is not a whole number"
        errors.set("ring", error)
        return None, error
    capacity = int(cap or ring.capacity.value or count)
    return RingRead(int(head), capacity, tuple(entries)), None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

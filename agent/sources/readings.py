"""From configured fields and raw values to tracker inputs (pure; shared by Modbus and OPC UA).

Both paths of one controller must give the same payload and hash, so naming of states,
channels and times happens here once: a state is the configured name of its value (or the
raw value), a ring entry's channel is named by the ring's ``channel`` values (or the
channel's position in the config), a boot id 0 in a ring entry means "none".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.sources.modbus_decode import counter_bits
from agent.sources.settings import Channel, Device, Field
from agent.transitions import ChannelRead, Observations, RingItem, state_name, time_text


def channel_fields(ch: Channel) -> list[tuple[str, Field]]:
    """A channel's mapped fields by role: transition_id, state, source_timestamp, latched.<name>."""
    out = [("transition_id", ch.transition_id), ("state", ch.state)]
    if ch.source_timestamp is not None:
        out.append(("source_timestamp", ch.source_timestamp))
    out += [(f"latched.{name}", f) for name, f in ch.latched.items()]
    return out


def channel_read(ch: Channel, values: Mapping[str, Any], raw: Mapping[str, Any]) -> ChannelRead:
    """``values`` holds decoded ``transition_id``, ``state``, ``source_timestamp`` (text or number)
    and latched field values; a missing ``transition_id`` or ``state`` is a failed read."""
    tid, state = values.get("transition_id"), values.get("state")
    if not isinstance(tid, int) or isinstance(tid, bool) or state is None:
        return ChannelRead(ch.name, None, error=str(raw.get("error", "not read")), raw=raw)
    ts = values.get("source_timestamp")
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ch.source_timestamp is not None:
        ts = time_text(ts, ch.source_timestamp.unit, ch.source_timestamp.clock)
    latched = {name: values[f"latched.{name}"] for name in ch.latched if f"latched.{name}" in values}
    return ChannelRead(
        channel=ch.name,
        transition_id=tid,
        state=state_name(state, ch.state.values),
        source_timestamp=ts if isinstance(ts, str) else None,
        latched=latched,
        bits=counter_bits(ch.transition_id.type) if ch.transition_id.register is not None else 32,
        raw=raw,
    )


def ring_channel(device: Device, index: Any) -> Channel | None:
    if isinstance(index, str):
        return next((c for c in device.channels if c.name == index), None)
    assert device.ring is not None
    names = device.ring.channel_names
    if names:
        name = names.get(index)
        return next((c for c in device.channels if c.name == name), None)
    return device.channels[index] if isinstance(index, int) and 0 <= index < len(device.channels) else None


def ring_item(device: Device, values: Mapping[str, Any]) -> RingItem | None:
    """One slot (``seq``, ``channel``, ``transition_id``, ``state``, optional ``boot_id`` and
    ``source_timestamp``) as a RingItem; None for an empty slot (seq 0)."""
    assert device.ring is not None
    seq = int(values.get("seq") or 0)
    if seq == 0:
        return None
    ch = ring_channel(device, values.get("channel"))
    boot = values.get("boot_id")
    ts = values.get("source_timestamp")
    ts_field: Field | None = device.ring.fields.get("source_timestamp")
    if isinstance(ts, int | float) and ts_field is not None:
        ts = time_text(ts, ts_field.unit, ts_field.clock)
    return RingItem(
        seq=seq,
        channel=ch.name if ch is not None else None,
        transition_id=int(values.get("transition_id") or 0),
        boot_id=str(boot) if boot else None,
        state=state_name(values.get("state"), ch.state.values if ch is not None else {}),
        source_timestamp=ts if isinstance(ts, str) else None,
        raw=dict(values),
    )


def merge(*parts: Observations) -> Observations:
    """Observations of one poll (events, then the read) as one."""
    return Observations(
        deliveries=tuple(d for p in parts for d in p.deliveries),
        boots=tuple(b for p in parts for b in p.boots),
        anomalies=tuple(a for p in parts for a in p.anomalies),
        notes=tuple(n for p in parts for n in p.notes),
    )

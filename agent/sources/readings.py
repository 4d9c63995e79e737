"""From configured fields and raw values to tracker inputs (pure; shared by Modbus and OPC UA).

Holds the naming of states, channels and times and the bad-value rules, once for both
protocols. It must not do I/O or know a protocol's wire format.

Both paths of one controller must give the same payload and hash, so naming of states,
channels and times happens here once: a state is the configured name of its value (or the
raw value), a ring entry's channel is named by the ring's ``channel`` values (or the
channel's position in the config), a boot id 0 in a ring entry means "none".

Bad values (docs/pollers.md, "Bad values"): **identity is strict, the payload is tolerant.**

* A transition id must be a whole number in 0 .. 2**64-1; all ones of a 32- or 64-bit counter
  (0xFFFFFFFF, 0xFFFF...FFFF: an unset register or a failed gateway read) is refused. The
  channel's read then fails (logged once, raw registers as evidence, nothing delivered); the
  next good read delivers, and what the counter skipped is a ``gap``. A 16-bit counter's
  0xFFFF is accepted: such counters reach it before every wrap.
* A boot id of 0 or all ones is "not set" (``identity_incomplete``, never made up).
* A state, or a latched value, that is NaN or Inf is ``null`` in the payload and flagged
  (``raw.flags``); a state value that has no configured name is delivered as the number and
  flagged. A real transition is never dropped for a bad payload value.
* A source timestamp that is no time (NaN, Inf, beyond year 9999) is ``null``, flagged.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.config.registers import counter_bits
from agent.config.sources import Channel, Device, Field
from agent.core.contract import ContractError
from agent.core.snapshot import ChannelRead, Observations, RingItem, state_name, time_text
from agent.core.timestamps import format_timestamp, normalize_timestamp


def channel_fields(ch: Channel) -> list[tuple[str, Field]]:
    """A channel's mapped fields by role: transition_id (none for a window channel), state,
    source_timestamp, latched.<name>."""
    out = [("transition_id", ch.transition_id)] if ch.transition_id is not None else []
    out.append(("state", ch.state))
    if ch.source_timestamp is not None:
        out.append(("source_timestamp", ch.source_timestamp))
    out += [(f"latched.{name}", f) for name, f in ch.latched.items()]
    return out


MAX_ID = 2**64 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadValue(ValueError):
    """A value that cannot be an identity (transition id, boot id, ring sequence number)."""


def identity_number(value: Any, bits: int = 64) -> int:
    """A transition id or sequence number as read, or BadValue saying why it is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(f"{_shown(value)} is not a whole number")
    if value < 0 or value > MAX_ID:
        raise BadValue(f"{value} is outside 0..2**64-1")
    if bits >= 32 and value in (2**32 - 1, MAX_ID):
        raise BadValue(f"{value:#x} is all ones: an unset register or a failed read, not a counter")
    return value


def boot_number(value: Any, bits: int | None = None) -> str | None:
    """A boot id as text; None for 0 or all ones ("not set"); BadValue for what is no id.

    All ones means the ``bits`` wide register (when known, as on Modbus), else 32 or 64 bits."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable():
        return value
    number = identity_number(value, bits=16)
    ones = (2**bits - 1,) if bits is not None else (2**32 - 1, MAX_ID)
    return None if number == 0 or number in ones else str(number)


def payload_value(value: Any) -> tuple[Any, str | None]:
    """(value for the payload, flag): what has no JSON form (NaN, Inf, a lone surrogate, an odd
    type) becomes None with a flag."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{value} is not a number; null in the payload"
    if isinstance(value, str) and _SURROGATE.search(value):
        return None, "text with a lone surrogate (not Unicode); null in the payload"
    if value is not None and not isinstance(value, str | int | float):
        return None, f"a {type(value).__name__} has no JSON form; null in the payload"
    return value, None


def timestamp_value(value: Any, f: Field | None) -> tuple[str | None, str | None]:
    """(contract text or None, flag) of a source timestamp read as a number, text or datetime."""
    if value is None or value == 0:
        return None, None
    text: str | None = None
    if isinstance(value, datetime):
        with contextlib.suppress(ValueError, OverflowError):
            text = format_timestamp(value if value.tzinfo else value.replace(tzinfo=UTC))
    elif isinstance(value, str):
        with contextlib.suppress(ContractError):
            text = normalize_timestamp(value, "source_timestamp")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = time_text(value, f.unit, f.clock) if f is not None else None
    if text is None:
        return None, f"source_timestamp {_shown(value)} is no time; null"
    return text, None


def _shown(value: Any) -> str:
    """A value read from a device, for a message: short, and bytes as hex, never as raw bytes."""
    if isinstance(value, bytes | bytearray):
        head = bytes(value[:8]).hex()
        return f"{len(value)} bytes (0x{head}{'...' if len(value) > 8 else ''})"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def channel_read(ch: Channel, values: Mapping[str, Any], raw: Mapping[str, Any]) -> ChannelRead:
    """``values`` holds decoded ``transition_id``, ``state``, ``source_timestamp`` (text or number)
    and latched field values; a missing or refused ``transition_id`` or ``state`` is a failed read."""
    if ch.transition_id is None:  # a window channel: the tracker keys it by state and time
        return _window_read(ch, values, raw)
    tid, state = values.get("transition_id"), values.get("state")
    bits = counter_bits(ch.transition_id.type) if ch.transition_id.register is not None else 32
    if "transition_id" in values and "state" in values:
        try:
            tid = identity_number(tid, bits)
        except BadValue as exc:
            raw = {**raw, "error": f"transition_id refused: {exc}"}
            tid = None
    if not isinstance(tid, int) or isinstance(tid, bool) or "state" not in values:
        return ChannelRead(ch.name, None, error=str(raw.get("error", "not read")), raw=raw)
    state, ts, latched, raw = _payload_fields(ch, values, raw)
    return ChannelRead(
        channel=ch.name,
        transition_id=tid,
        state=state,
        source_timestamp=ts,
        latched=latched,
        bits=bits,
        raw=raw,
    )


def _window_read(ch: Channel, values: Mapping[str, Any], raw: Mapping[str, Any]) -> ChannelRead:
    """A channel without a counter (``identity: window``): its state, time and latched fields."""
    window_ms = ch.window_ms
    if "state" not in values or values.get("state") is None or raw.get("error"):
        return ChannelRead(
            ch.name, None, error=str(raw.get("error", "not read")), raw=raw, window_ms=window_ms
        )
    state, ts, latched, raw = _payload_fields(ch, values, raw)
    if state is None:  # the state is part of the key here: identity is strict
        error = f"state refused: {'; '.join(raw.get('flags', ()))} (a window key is made from the state)"
        return ChannelRead(ch.name, None, error=error, raw={**raw, "error": error}, window_ms=window_ms)
    return ChannelRead(ch.name, None, state, ts, latched, raw=raw, window_ms=window_ms)


def _payload_fields(
    ch: Channel, values: Mapping[str, Any], raw: Mapping[str, Any]
) -> tuple[Any, str | None, dict[str, Any], Mapping[str, Any]]:
    """(state, source timestamp, latched values, raw with flags): the tolerant payload rules."""
    state = values.get("state")
    flags: list[str] = []
    state, flag = payload_value(state)
    if flag:
        flags.append(f"state {flag}")
    elif isinstance(state, int) and ch.state.values and state not in ch.state.values:
        flags.append(f"state {state} has no configured name; delivered as the number")
    ts, flag = timestamp_value(values.get("source_timestamp"), ch.source_timestamp)
    if flag:
        flags.append(flag)
    latched = {}
    for name in ch.latched:
        if f"latched.{name}" in values:
            latched[name], flag = payload_value(values[f"latched.{name}"])
            if flag:
                flags.append(f"latched.{name} {flag}")
    if flags:
        raw = {**raw, "flags": flags}
    return state_name(state, ch.state.values) if state is not None else None, ts, latched, raw


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
    ``source_timestamp``) as a RingItem; None for an empty slot (seq 0) and for a slot whose
    identity is refused (the counters then report what it held as a gap)."""
    assert device.ring is not None
    try:
        seq = identity_number(values.get("seq") or 0)
        tid = identity_number(values.get("transition_id") or 0)
        boot = boot_number(values.get("boot_id") or 0)
    except BadValue:
        return None
    if seq == 0:
        return None
    ch = ring_channel(device, values.get("channel"))
    ts, _ = timestamp_value(values.get("source_timestamp"), device.ring.fields.get("source_timestamp"))
    state, _ = payload_value(values.get("state"))
    return RingItem(
        seq=seq,
        channel=ch.name if ch is not None else None,
        transition_id=tid,
        boot_id=boot,
        state=state_name(state, ch.state.values if ch is not None else {}),
        source_timestamp=ts,
        raw={k: v if payload_value(v)[1] is None else str(v) for k, v in values.items()},
    )


def merge(*parts: Observations) -> Observations:
    """Observations of one poll (events, then the read) as one."""
    return Observations(
        deliveries=tuple(d for p in parts for d in p.deliveries),
        boots=tuple(b for p in parts for b in p.boots),
        anomalies=tuple(a for p in parts for a in p.anomalies),
        notes=tuple(n for p in parts for n in p.notes),
        positions=next((p.positions for p in reversed(parts) if p.positions is not None), None),
    )

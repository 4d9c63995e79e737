"""Field specs of a device entry: where one value lives, and the checks on Modbus reads.

A field may name a Modbus register (or a slot offset) and an OPC UA node; which is required
depends on the device's connections. Reads YAML sections only; imports nothing above config.
"""

from __future__ import annotations

from typing import Any

from agent.config.registers import TABLES, UNSIGNED, WORDS
from agent.config.sources import Device, Field
from agent.config.yaml_lines import _int_in, _one_of, _Section, _text, _values


class _FieldReader:
    """Reads field specs; which keys are required depends on the device's connection kinds."""

    def __init__(self, modbus: bool, opcua: bool) -> None:
        self.modbus, self.opcua = modbus, opcua

    def read(self, s: _Section, *, in_slot: bool = False, time: bool = False) -> Field:
        register = s.get("register", _int_in(0, 65535), None)
        offset = s.get("offset", _int_in(0, 124), None)
        node = s.get("node", _text, None)
        f = Field(
            register=register,
            type=s.get("type", _one_of(*WORDS), "uint64" if time else "uint16"),
            table=s.get("table", _one_of(*TABLES), "holding"),
            node=node,
            values=s.get("values", _values, {}),
            unit=s.get("unit", _one_of("ms", "s"), "ms"),
            clock=s.get("clock", _zone, "UTC"),
            offset=offset,
            value=s.get("value", _int_in(0, 2**32 - 1), None),
            word_order=s.get("word_order", _one_of("big", "little"), None),  # type: ignore[arg-type]
            line=s.line,
        )
        s.get("epoch", _one_of("unix"), "unix")
        where = "offset" if in_slot else "register"
        if s.ok and self.modbus and (offset if in_slot else register) is None and f.value is None:
            s.ctx.problem(s.line, s.key_path(where), "missing (the device has a Modbus connection)")
        if s.ok and self.opcua and node is None and f.value is None:
            s.ctx.problem(s.line, s.key_path("node"), "missing (the device has an OPC UA connection)")
        if register is not None and register + f.words > 65536:
            s.problem("register", f"a {f.type} at {register} runs past register 65535")
        s.finish()
        return f


def _counter(s: _Section, key: str, f: Field) -> Field:
    """Identity registers hold unsigned whole numbers: a float or signed type would let NaN or a
    negative number become an id (docs/pollers.md, "Bad values")."""
    if (f.register is not None or f.offset is not None) and f.type not in UNSIGNED:
        s.problem(key, f"type {f.type} cannot hold an id or counter; use {', '.join(UNSIGNED)}")
    return f


def _zone(v: Any) -> str:
    text = _text(v)
    if text != "UTC":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(text)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"{text!r} is not a time zone (e.g. UTC or Europe/Berlin)") from exc
    return text


def _check_modbus_reads(s: _Section, dev: Device) -> None:
    """A slot field must fit its slot, and the ring read must cover header and slots."""
    ring = dev.ring
    if ring is None or ring.slot_size is None or ring.slots_register is None:
        return
    for name, f in ring.fields.items():
        if f.offset is not None and f.offset + f.words > ring.slot_size:
            s.ctx.problem(
                f.line,
                f"{s.path}.ring.slots.fields.{name}.offset",
                f"a {f.type} at offset {f.offset} does not fit a slot of {ring.slot_size} registers",
            )
    if ring.read is not None:
        start, count = ring.read
        end = ring.slots_register + ring.slot_size * ring.slot_count
        if ring.head.register is not None and not (start <= ring.head.register and end <= start + count):
            s.ctx.problem(
                s.line,
                f"{s.path}.ring.read",
                f"registers {start}..{start + count - 1} do not cover the head and all slots "
                f"(up to {end - 1})",
            )

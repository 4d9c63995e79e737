"""A Modbus device's ring buffer (pure): the requests that read it, and its header and slots
decoded from the registers read into a head, a capacity and ring items. `ModbusSource`
(`agent.sources.modbus.poller`) sends the requests and keeps the errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.config.sources import Device, Field
from agent.core.snapshot import RingItem
from agent.sources.modbus.decode import decode
from agent.sources.modbus.plan import Block, plan_blocks, take
from agent.sources.readings import ring_item


def _word_order(dev: Device, f: Field) -> str:
    return f.word_order or dev.word_order


def ring_blocks(dev: Device) -> tuple[Block, ...]:
    """The requests of the ring: header and slots, in one request where the map allows."""
    ring = dev.ring
    if ring is None:
        return ()
    if ring.read is not None:
        return (Block("holding", ring.read[0], ring.read[1]),)
    fields: list[Field] = [ring.head] + ([ring.capacity] if ring.capacity.register is not None else [])
    if ring.slots_register is not None and ring.slot_size is not None:
        fields.append(Field(register=ring.slots_register, type="uint16"))
        end = ring.slots_register + ring.slot_size * ring.slot_count - 1
        fields.append(Field(register=end, type="uint16"))
    return plan_blocks(fields, max_gap=125)


def ring_header(dev: Device, got: Mapping[Block, Sequence[int]], head_regs: Sequence[int]) -> tuple[int, int]:
    """(head, capacity): the capacity register when mapped and not 0, else the configured one."""
    ring = dev.ring
    assert ring is not None
    capacity = ring.capacity.value or ring.slot_count
    head = int(decode(head_regs, ring.head.type, _word_order(dev, ring.head)))
    if ring.capacity.register is not None and (cap_regs := take(got, ring.capacity)) is not None:
        order = _word_order(dev, ring.capacity)
        capacity = int(decode(cap_regs, ring.capacity.type, order)) or capacity
    return head, capacity


def ring_entries(dev: Device, got: Mapping[Block, Sequence[int]], capacity: int) -> tuple[RingItem, ...]:
    """The filled slots, at most ``capacity`` of them, as ring items."""
    ring = dev.ring
    assert ring is not None and ring.slots_register is not None and ring.slot_size is not None
    entries: list[RingItem] = []
    for k in range(min(capacity, ring.slot_count)):
        base = ring.slots_register + k * ring.slot_size
        values: dict[str, Any] = {}
        for name, f in ring.fields.items():
            regs = take(got, replace(f, register=base + (f.offset or 0)))
            if regs is not None:
                values[name] = decode(regs, f.type, _word_order(dev, f))
        item = ring_item(dev, values)
        if item is not None:
            entries.append(item)
    return tuple(entries)

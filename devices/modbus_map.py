"""The documented Modbus register map of a simulated controller, and its register image (pure).

Layout (holding registers; input registers are the same memory)::

    0..1    boot id, uint32                      (unmapped -> illegal address when the controller has none)
    2..9    reserved, 0
    10+8i   channel i: +0 transition id (uint16 in +0 with +1 reserved, or uint32 in +0..+1)
                       +2 state uint16, +3..+6 source time uint64 ms since the Unix epoch (UTC), +7 reserved
    R       ring header: R+0..R+1 head uint32 (entries ever written), R+2 capacity uint16, R+3 slot size (12)
    R+4+12k ring slot k: +0 seq uint32 (0 = empty), +2 channel index uint16, +3 state uint16,
                         +4 transition id uint32, +6 boot id uint32 (0 without boot id),
                         +8 source time uint64 ms

``R`` is 100 for up to 11 channels (else the next multiple of 100 after the channels). The
entry with seq ``s`` is in slot ``(s - 1) % capacity``. Header and slots together stay within
125 registers so that one read request returns a consistent ring (capacity <= 10).
Multi-register values use the map's word order; each register is big-endian, as Modbus says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from devices.controller import Controller

WordOrder = Literal["big", "little"]

BOOT_REGISTER = 0
CHANNEL_BASE = 10
CHANNEL_STRIDE = 8
RING_HEADER = 4
SLOT_SIZE = 12
MAX_READ = 125
MAX_RING_CAPACITY = (MAX_READ - RING_HEADER) // SLOT_SIZE


def to_registers(value: int, words: int, word_order: WordOrder) -> list[int]:
    """An unsigned integer as ``words`` 16-bit registers, most significant word first for "big"."""
    regs = [(value >> (16 * k)) & 0xFFFF for k in reversed(range(words))]
    return regs if word_order == "big" else regs[::-1]


def from_registers(regs: list[int], word_order: WordOrder) -> int:
    """The inverse of :func:`to_registers`."""
    ordered = regs if word_order == "big" else regs[::-1]
    value = 0
    for reg in ordered:
        value = (value << 16) | reg
    return value


@dataclass(frozen=True)
class RegisterMap:
    """Where each value of one controller lives; ``encode`` turns the model into the register image."""

    controller: Controller
    word_order: WordOrder = "big"

    def __post_init__(self) -> None:
        if self.controller.ring_capacity > MAX_RING_CAPACITY:
            raise ValueError(
                f"controller {self.controller.name!r}: a ring of {self.controller.ring_capacity} slots "
                f"does not fit one Modbus read with its header (at most {MAX_RING_CAPACITY})"
            )

    @property
    def boot_register(self) -> int | None:
        return BOOT_REGISTER if self.controller.has_boot_id else None

    @property
    def first_register(self) -> int:
        """The first mapped register: reads below it are illegal addresses (no boot id)."""
        return BOOT_REGISTER if self.controller.has_boot_id else BOOT_REGISTER + 2

    def channel_register(self, channel: int) -> int:
        return CHANNEL_BASE + CHANNEL_STRIDE * channel

    @property
    def ring_register(self) -> int:
        channels_end = CHANNEL_BASE + CHANNEL_STRIDE * len(self.controller.channels)
        return 100 if channels_end <= 100 else -(-channels_end // 100) * 100

    @property
    def slots_register(self) -> int:
        return self.ring_register + RING_HEADER

    @property
    def ring_read_count(self) -> int:
        """Registers of header plus all slots: one request reads the whole ring."""
        return RING_HEADER + SLOT_SIZE * self.controller.ring_capacity

    @property
    def end(self) -> int:
        """One past the last mapped register."""
        return self.ring_register + self.ring_read_count

    def encode(self) -> list[int]:
        """The register image of the controller from register 0 to :attr:`end` (exclusive)."""
        c, wo = self.controller, self.word_order
        image = [0] * self.end
        if c.boot_id is not None:
            image[0:2] = to_registers(c.boot_id, 2, wo)
        for i, spec in enumerate(c.channels):
            live, base = c.channel(i), self.channel_register(i)
            words = spec.counter_bits // 16
            image[base : base + words] = to_registers(live.transition_id, words, wo)
            image[base + 2] = live.state
            image[base + 3 : base + 7] = to_registers(live.source_time_ms, 4, wo)
        r = self.ring_register
        image[r : r + 2] = to_registers(c.head, 2, wo)
        image[r + 2] = c.ring_capacity
        image[r + 3] = SLOT_SIZE
        for k, entry in enumerate(c.ring_slots()):
            if entry is None:
                continue
            s = self.slots_register + SLOT_SIZE * k
            image[s : s + SLOT_SIZE] = [
                *to_registers(entry.seq, 2, wo),
                entry.channel,
                entry.state,
                *to_registers(entry.transition_id, 2, wo),
                *to_registers(entry.boot_id, 2, wo),
                *to_registers(entry.source_time_ms, 4, wo),
            ]
        return image

    def field_specs(self) -> dict[str, object]:
        """The Modbus half of the agent config for this device (merged with OPC UA node ids elsewhere)."""
        c = self.controller
        out: dict[str, object] = {}
        if self.boot_register is not None:
            out["boot_id"] = {"register": self.boot_register, "type": "uint32"}
        channels: dict[str, object] = {}
        for i, spec in enumerate(c.channels):
            base = self.channel_register(i)
            channels[spec.name] = {
                "transition_id": {"register": base, "type": f"uint{spec.counter_bits}"},
                "state": {"register": base + 2, "type": "uint16", "values": dict(spec.values)},
                "source_timestamp": {"register": base + 3, "type": "uint64", "unit": "ms", "epoch": "unix"},
            }
        out["channels"] = channels
        r = self.ring_register
        slot: dict[str, object] = {
            "seq": {"offset": 0, "type": "uint32"},
            "channel": {
                "offset": 2,
                "type": "uint16",
                "values": {i: s.name for i, s in enumerate(c.channels)},
            },
            "state": {"offset": 3, "type": "uint16"},
            "transition_id": {"offset": 4, "type": "uint32"},
        }
        if c.has_boot_id:
            slot["boot_id"] = {"offset": 6, "type": "uint32"}
        slot["source_timestamp"] = {"offset": 8, "type": "uint64", "unit": "ms", "epoch": "unix"}
        out["ring"] = {
            "read": {"register": r, "count": self.ring_read_count},
            "head": {"register": r, "type": "uint32"},
            "capacity": {"register": r + 2, "type": "uint16", "value": c.ring_capacity},
            "slots": {
                "register": self.slots_register,
                "size": SLOT_SIZE,
                "count": c.ring_capacity,
                "fields": slot,
            },
        }
        return out

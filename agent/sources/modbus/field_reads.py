"""What one read of a Modbus device's boot id and channel fields gave (pure).

Holds :class:`FieldReads` (the registers read, per block, and what could not be read) and
:func:`boot_value` (the boot id those registers hold, or none). It must not do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.config.sources import Device
from agent.sources.modbus.decode import DecodeError, decode
from agent.sources.modbus.plan import Block, take
from agent.sources.readings import BadValue, boot_number


@dataclass
class FieldReads:
    """The registers of the boot id and the channel fields as read, and what could not be read."""

    got: dict[Block, list[int]] = field(default_factory=dict)
    boot_error: str | None = None
    channel_errors: dict[str, str] = field(default_factory=dict)
    split: bool = False


def boot_value(dev: Device, got: Mapping[Block, Sequence[int]]) -> str | None:
    """The boot id held in ``got``; None when not read, not decodable, or not set (0, all ones)."""
    f = dev.boot_id
    if f is None:
        return None
    regs = take(got, f)
    if regs is None:
        return None
    try:  # 0 or all ones = not set: no generation is made up
        return boot_number(decode(regs, f.type, f.word_order or dev.word_order), bits=16 * f.words)
    except (BadValue, DecodeError):
        return None

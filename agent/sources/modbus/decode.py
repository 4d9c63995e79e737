"""Modbus register decoding (pure): 16/32/64-bit integers and floats, bits, word order.

Holds decode and encode of one value (the width of a counter type is
`agent.config.registers.counter_bits`). It must not do I/O.

Each register is big-endian, as Modbus defines; a value of several registers follows the
device's word order: ``big`` puts the most significant word first, ``little`` reverses the
words (byte order within a word never changes). ``bool`` is a coil/discrete input, or a
register that is non-zero.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from agent.config.registers import WORDS

__all__ = ["WORDS", "DecodeError", "decode", "encode"]

_FLOAT = {"float32": ">f", "float64": ">d"}


class DecodeError(ValueError):
    """The registers do not hold a value of the configured type (wrong count, unknown type)."""


def decode(regs: Sequence[int], kind: str, word_order: str = "big") -> int | float | bool:
    """The value of ``kind`` held in ``regs`` (exactly the registers of that value)."""
    words = WORDS.get(kind)
    if words is None:
        raise DecodeError(f"unknown type {kind!r}")
    if len(regs) != words:
        raise DecodeError(f"a {kind} needs {words} registers, got {len(regs)}")
    if kind == "bool":
        return bool(regs[0])
    ordered = list(regs) if word_order == "big" or words == 1 else list(reversed(regs))
    if kind in _FLOAT:
        raw = b"".join((r & 0xFFFF).to_bytes(2, "big") for r in ordered)
        value: float = struct.unpack(_FLOAT[kind], raw)[0]
        return value
    number = 0
    for r in ordered:
        number = (number << 16) | (r & 0xFFFF)
    if kind.startswith("int") and number >= 1 << (16 * words - 1):
        number -= 1 << (16 * words)
    return number


def encode(value: int | float | bool, kind: str, word_order: str = "big") -> list[int]:
    """The inverse of :func:`decode` (tests and the simulator-free table cases use it)."""
    words = WORDS[kind]
    if kind == "bool":
        return [1 if value else 0]
    if kind in _FLOAT:
        raw = struct.pack(_FLOAT[kind], float(value))
        regs = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    else:
        number = int(value) % (1 << (16 * words))
        regs = [(number >> (16 * k)) & 0xFFFF for k in reversed(range(words))]
    return regs if word_order == "big" else regs[::-1]

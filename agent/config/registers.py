"""The Modbus register data types the configuration accepts, and how many registers each takes.

A plain table read by the config checks, the readings and the Modbus decoder (and the width of a
transition counter of each type); it must not import anything.
"""

from __future__ import annotations

WORDS: dict[str, int] = {
    "uint16": 1,
    "int16": 1,
    "uint32": 2,
    "int32": 2,
    "uint64": 4,
    "int64": 4,
    "float32": 2,
    "float64": 4,
    "bool": 1,
}
UNSIGNED = ("uint16", "uint32", "uint64")
TABLES = ("holding", "input", "coil", "discrete")


def counter_bits(kind: str) -> int:
    """Width of a transition counter of this type, for the wrap rule."""
    return 16 * WORDS.get(kind, 2)

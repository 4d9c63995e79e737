"""Modbus read planning (pure): the fields of a device into as few requests as the map allows.

Holds the block planner and the lookup of a field in what was read. It must not do I/O:
the poller sends the requests planned here.

Fields of one table (holding, input, coil, discrete) are sorted by address and merged into
contiguous blocks of at most 125 registers (2000 bits for coils and discrete inputs), bridging
holes of up to ``max_gap`` unmapped addresses (reading a few spare registers costs less than
another round trip; a PLC that refuses reads of unmapped addresses wants ``max_gap: 0``).

Consistency: a controller serves one request atomically. When the boot id and every channel
field fit one block, one request gives a consistent snapshot. Otherwise the plan reads the
boot id first and again last (``recheck_boot``), and a snapshot whose boot id moved is read
again (see :mod:`agent.core.tracker`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

MAX_REGISTERS = 125
MAX_BITS = 2000
BIT_TABLES = ("coil", "discrete")


class FieldLike(Protocol):
    @property
    def register(self) -> int | None: ...
    @property
    def table(self) -> str: ...
    @property
    def words(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Block:
    """One read request: ``count`` registers (or bits) of ``table`` from ``start``."""

    table: str
    start: int
    count: int

    def covers(self, table: str, register: int, words: int) -> bool:
        return table == self.table and self.start <= register and register + words <= self.start + self.count


@dataclass(frozen=True, slots=True)
class Plan:
    blocks: tuple[Block, ...]
    boot: Block | None = None
    recheck_boot: bool = False


def plan_blocks(fields: Iterable[FieldLike], *, max_gap: int = 16) -> tuple[Block, ...]:
    """Contiguous blocks covering every field with a register, per table, in address order."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for f in fields:
        if f.register is not None:
            spans.setdefault(f.table, []).append((f.register, f.register + f.words))
    out: list[Block] = []
    for table in sorted(spans):
        limit = MAX_BITS if table in BIT_TABLES else MAX_REGISTERS
        start = end = -1
        for lo, hi in sorted(spans[table]):
            if start >= 0 and lo - end <= max_gap and max(end, hi) - start <= limit:
                end = max(end, hi)
                continue
            if start >= 0:
                out.append(Block(table, start, end - start))
            start, end = lo, hi
        if start >= 0:
            out.append(Block(table, start, end - start))
    return tuple(out)


def plan_reads(boot: FieldLike | None, fields: Sequence[FieldLike], *, max_gap: int = 16) -> Plan:
    """The live read of a device: boot id and channel fields, the boot's block first.

    With more than one block the boot id is read again after the others (``recheck_boot``),
    in a block of its own.
    """
    blocks = list(plan_blocks([*([boot] if boot is not None else []), *fields], max_gap=max_gap))
    if boot is None or boot.register is None:
        return Plan(tuple(blocks))
    first = next(b for b in blocks if b.covers(boot.table, boot.register, boot.words))
    blocks.remove(first)
    own = Block(boot.table, boot.register, boot.words)
    return Plan((first, *blocks), own, recheck_boot=bool(blocks))


def take(results: Mapping[Block, Sequence[int]], f: FieldLike) -> list[int] | None:
    """The registers of field ``f`` out of the blocks read (None when no block read covers it)."""
    if f.register is None:
        return None
    for block, regs in results.items():
        if block.covers(f.table, f.register, f.words):
            i = f.register - block.start
            return list(regs[i : i + f.words])
    return None

"""Table tests of Modbus read planning and register decoding (pure)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agent.sources.modbus.decode import DecodeError, decode, encode
from agent.sources.modbus.plan import Block, plan_blocks, plan_reads, take


@dataclass(frozen=True)
class F:
    register: int | None
    words: int = 1
    table: str = "holding"


@pytest.mark.parametrize(
    ("fields", "gap", "blocks"),
    [
        pytest.param(
            [F(0, 2), F(10, 2), F(12), F(13, 4)],
            16,
            [Block("holding", 0, 17)],
            id="boot id and a channel a few registers apart are one read",
        ),
        pytest.param(
            [F(0, 2), F(100, 2)],
            16,
            [Block("holding", 0, 2), Block("holding", 100, 2)],
            id="a hole wider than max_gap splits the read",
        ),
        pytest.param(
            [F(0), F(125)],
            200,
            [Block("holding", 0, 1), Block("holding", 125, 1)],
            id="never more than 125 registers in one read",
        ),
        pytest.param(
            [F(0), F(0, table="input")],
            16,
            [Block("holding", 0, 1), Block("input", 0, 1)],
            id="each register table is read on its own",
        ),
        pytest.param(
            [F(0, table="coil"), F(1000, table="coil")],
            2000,
            [Block("coil", 0, 1001)],
            id="coils go up to 2000 bits per read",
        ),
        pytest.param([F(None)], 16, [], id="fields without a register are OPC UA only"),
    ],
)
def test_plan_blocks(fields: list[F], gap: int, blocks: list[Block]) -> None:
    assert list(plan_blocks(fields, max_gap=gap)) == blocks


def test_the_boot_id_is_read_again_when_the_map_needs_more_than_one_read() -> None:
    one = plan_reads(F(0, 2), [F(10, 2), F(12)])
    assert (len(one.blocks), one.recheck_boot) == (1, False)
    two = plan_reads(F(0, 2), [F(200, 2)])
    assert two.blocks[0].start == 0 and two.recheck_boot and two.boot == Block("holding", 0, 2)


def test_take_finds_a_field_in_the_blocks_read() -> None:
    got = {Block("holding", 10, 8): [1, 2, 3, 4, 5, 6, 7, 8]}
    assert take(got, F(12, 2)) == [3, 4]
    assert take(got, F(40)) is None


@pytest.mark.parametrize(
    ("regs", "kind", "order", "value"),
    [
        pytest.param([0xFFFF], "uint16", "big", 65535, id="uint16"),
        pytest.param([0xFFFF], "int16", "big", -1, id="int16 is two's complement"),
        pytest.param([0x0001, 0x0002], "uint32", "big", 0x00010002, id="uint32 big word order"),
        pytest.param([0x0002, 0x0001], "uint32", "little", 0x00010002, id="uint32 little word order"),
        pytest.param([0xFFFF, 0xFFFE], "int32", "big", -2, id="int32"),
        pytest.param([0, 0x1A2, 0x379E, 0x7E62], "uint64", "big", 0x01A2379E7E62, id="uint64 ms time"),
        pytest.param([0x7E62, 0x379E, 0x1A2, 0], "uint64", "little", 0x01A2379E7E62, id="uint64 little"),
        pytest.param([0xFFFF] * 4, "int64", "big", -1, id="int64"),
        pytest.param([0x3FC0, 0x0000], "float32", "big", 1.5, id="float32"),
        pytest.param([0x0000, 0x3FC0], "float32", "little", 1.5, id="float32 little word order"),
        pytest.param([0x3FF8, 0, 0, 0], "float64", "big", 1.5, id="float64"),
        pytest.param([1], "bool", "big", True, id="a coil"),
    ],
)
def test_decode(regs: list[int], kind: str, order: str, value: float) -> None:
    assert decode(regs, kind, order) == value
    assert encode(value, kind, order) == regs


@pytest.mark.parametrize(
    ("regs", "kind"),
    [pytest.param([1], "uint32", id="too few registers"), pytest.param([1], "uint128", id="an unknown type")],
)
def test_decode_refuses(regs: list[int], kind: str) -> None:
    with pytest.raises(DecodeError):
        decode(regs, kind)

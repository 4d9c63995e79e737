"""Our Modbus TCP client's frames (agent.sources.modbus.frames) and its stream (tcp_client._Link):
a table of requests and answers, hypothesis round trips and garbage (issue 35)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sources.modbus.frames import FrameError, Reply, build_request, frame_length, parse_reply
from agent.sources.modbus.tcp_client import _Link


def answer(tid: int, unit: int, pdu: bytes, *, protocol: int = 0, length: int | None = None) -> bytes:
    body = bytes([unit]) + pdu
    return struct.pack(">HHH", tid, protocol, len(body) if length is None else length) + body


def registers_pdu(fc: int, regs: list[int]) -> bytes:
    return bytes([fc, 2 * len(regs)]) + struct.pack(f">{len(regs)}H", *regs)


def bits_pdu(fc: int, bits: list[int]) -> bytes:
    data = bytearray((len(bits) + 7) // 8)
    for i, b in enumerate(bits):
        data[i // 8] |= b << (i % 8)
    return bytes([fc, len(data)]) + bytes(data)


@pytest.mark.parametrize(
    ("args", "frame"),
    [
        ((1, 1, 3, 0, 17), "0001 0000 0006 01 03 0000 0011"),
        ((0xFFFF, 0xFF, 4, 0xFFFF, 1), "ffff 0000 0006 ff 04 ffff 0001"),
        ((7, 0, 1, 100, 2000), "0007 0000 0006 00 01 0064 07d0"),
        ((2, 3, 2, 65535, 1), "0002 0000 0006 03 02 ffff 0001"),
    ],
)
def test_a_request_is_the_mbap_header_and_the_read(args: tuple[int, ...], frame: str) -> None:
    assert build_request(*args) == bytes.fromhex(frame.replace(" ", ""))


@pytest.mark.parametrize(
    "args",
    [
        (1, 1, 5, 0, 1),  # a write: never sent
        (1, 1, 16, 0, 1),
        (1, 1, 3, 0, 0),
        (1, 1, 3, 0, 126),
        (1, 1, 1, 0, 2001),
        (1, 1, 3, 65535, 2),
        (1, 256, 3, 0, 1),
        (65536, 1, 3, 0, 1),
    ],
)
def test_anything_but_a_read_within_the_limits_is_not_built(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        build_request(*args)


OK_REGS = answer(5, 1, registers_pdu(3, [0x1234, 0xABCD]))


@pytest.mark.parametrize(
    ("frame", "tid", "unit", "fc", "want"),
    [
        (OK_REGS, 5, 1, 3, Reply(3, 1, [0x1234, 0xABCD])),
        (answer(5, 1, registers_pdu(4, [0, 65535])), 5, 1, 4, Reply(4, 1, [0, 65535])),
        # bits LSB first, every bit of every byte (the caller cuts them to the count)
        (
            answer(5, 1, bytes([1, 2, 0b10000101, 0b1])),
            5,
            1,
            1,
            Reply(1, 1, [1, 0, 1, 0, 0, 0, 0, 1] + [1] + [0] * 7),
        ),
        (answer(5, 1, bytes([0x83, 2])), 5, 1, 3, Reply(0x83, 1, [], exception_code=2)),
        (answer(5, 1, bytes([0x84, 11])), 5, 1, 4, Reply(0x84, 1, [], exception_code=11)),
        # another function, well framed: returned for response_problem to refuse
        (answer(5, 1, registers_pdu(4, [1])), 5, 1, 3, Reply(4, 1, [1])),
        (
            answer(5, 1, bytes([3, 3, 0, 1, 0])),
            5,
            1,
            3,
            Reply(3, 1, [1], problem="odd byte count 3 (1.5 registers)"),
        ),
    ],
)
def test_an_answer_is_parsed(frame: bytes, tid: int, unit: int, fc: int, want: Reply) -> None:
    assert parse_reply(frame, tid, unit, fc) == want


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (answer(6, 1, registers_pdu(3, [1])), "transaction id 6 in the answer, 5 asked"),
        (answer(5, 2, registers_pdu(3, [1])), "unit id 2 in the answer, 1 asked"),
        (answer(5, 1, registers_pdu(3, [1]), protocol=1), "protocol id 1"),
        (answer(5, 1, registers_pdu(3, [1]), length=3), "length 3 in a frame of 11 bytes"),
        (answer(5, 1, bytes([3, 4, 0, 1])), "byte count 4 with 2 bytes after it"),
        (answer(5, 1, bytes([0x83])), "a frame of 8 bytes"),  # no code after the function
        (answer(5, 1, bytes([0x83, 2, 0])), "an exception answer of 2 bytes"),
        (OK_REGS[:8], "a frame of 8 bytes"),
    ],
)
def test_a_frame_that_is_not_the_answer_is_not_trusted(frame: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        parse_reply(frame, 5, 1, 3)


@given(
    tid=st.integers(0, 0xFFFF),
    unit=st.integers(0, 0xFF),
    fc=st.sampled_from([3, 4]),
    regs=st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=125),
)
def test_registers_round_trip(tid: int, unit: int, fc: int, regs: list[int]) -> None:
    frame = answer(tid, unit, registers_pdu(fc, regs))
    assert frame_length(frame[:6]) == len(frame)
    assert parse_reply(frame, tid, unit, fc) == Reply(fc, unit, regs)


@given(
    tid=st.integers(0, 0xFFFF),
    fc=st.sampled_from([1, 2]),
    bits=st.lists(st.integers(0, 1), min_size=1, max_size=2000),
)
def test_bits_round_trip_lsb_first(tid: int, fc: int, bits: list[int]) -> None:
    got = parse_reply(answer(tid, 1, bits_pdu(fc, bits)), tid, 1, fc)
    assert got.values[: len(bits)] == bits and not any(got.values[len(bits) :])
    assert len(bits) <= len(got.values) < len(bits) + 8


@given(st.binary(max_size=300))
def test_garbage_is_a_reply_or_a_frame_error_never_a_crash(data: bytes) -> None:
    try:
        if len(data) >= 6:
            frame_length(data[:6])
        reply = parse_reply(data, 5, 1, 3)
    except FrameError:
        return
    assert all(0 <= v <= 0xFFFF for v in reply.values)


class FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def link_waiting() -> tuple[_Link, asyncio.Future[bytes], FakeTransport]:
    link, transport = _Link(), FakeTransport()
    link.transport = transport  # type: ignore[assignment]
    waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    link.waiter = waiter
    return link, waiter, transport


async def test_an_answer_in_pieces_is_put_together() -> None:
    link, waiter, transport = link_waiting()
    for i in range(len(OK_REGS)):
        link.data_received(OK_REGS[i : i + 1])
    assert await waiter == OK_REGS and not transport.closed and not link.buf


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (OK_REGS + b"\x00", "1 bytes after the answer"),
        (answer(5, 1, b"\x03", protocol=9), "protocol id 9"),
        (b"\x00\x05\x00\x00\x01\x00", "length 256"),
    ],
)
async def test_bytes_past_the_answer_or_a_bad_header_break_the_stream(data: bytes, why: str) -> None:
    link, waiter, transport = link_waiting()
    link.data_received(data)
    with pytest.raises(FrameError, match=why):
        await waiter
    assert transport.closed and link.broken is not None


async def test_bytes_nobody_asked_for_and_a_closed_connection_break_the_stream() -> None:
    link, transport = _Link(), FakeTransport()
    link.transport = transport  # type: ignore[assignment]
    link.data_received(OK_REGS)
    assert transport.closed and "nobody asked for" in str(link.broken)
    link, waiter, _ = link_waiting()
    link.data_received(OK_REGS[:7])
    link.connection_lost(None)
    with pytest.raises(ConnectionError, match="connection closed"):
        await waiter


def test_reply_reads_like_a_pymodbus_response() -> None:
    r: Any = Reply(0x83, 1, [], exception_code=2)
    assert r.isError() and not Reply(3, 1, [1]).isError()

"""Modbus TCP frames of the four read requests (function codes 1-4): build one, parse its answer.

Pure (no I/O, no state), used by :mod:`agent.sources.modbus.tcp_client`. A frame that is not a
whole, consistent answer to the request it follows (another transaction id or unit id, a protocol
id other than 0, a length or byte count that does not add up, a truncated or garbage frame)
raises :class:`FrameError`: the stream is no longer trusted. A well-framed answer that answers
something else (another function, fewer or more values than asked) is returned as it came, for
:func:`agent.sources.modbus.answers.response_problem` to refuse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

READ_CODES = (1, 2, 3, 4)  # coils, discrete inputs, holding registers, input registers
BIT_CODES = (1, 2)
MAX_COUNT = {1: 2000, 2: 2000, 3: 125, 4: 125}  # the protocol's limits per request
HEADER = 6  # transaction id, protocol id, length: the bytes before the unit id
_REQUEST = struct.Struct(">HHHBBHH")
_ANSWER_HEAD = struct.Struct(">HHHBB")
_HEAD = struct.Struct(">HHH")


class FrameError(Exception):
    """The bytes are not a whole answer to the request: the stream cannot be trusted."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: ``values`` are 16-bit registers, or bits (LSB first, every bit of every byte
    sent, so up to 7 past the count asked); ``exception_code`` is set for an exception answer."""

    function_code: int
    unit: int | None
    values: list[int]
    exception_code: int | None = None
    problem: str | None = None  # well framed but not whole values (an odd byte count of registers)

    def isError(self) -> bool:  # spelled as pymodbus spells it
        return self.exception_code is not None


def build_request(tid: int, unit: int, function_code: int, start: int, count: int) -> bytes:
    """The request frame of one read. Refuses anything but a read (codes 1-4) within its limits."""
    if function_code not in READ_CODES:
        raise ValueError(f"function code {function_code}: only reads (1-4) are sent")
    if not 1 <= count <= MAX_COUNT[function_code]:
        raise ValueError(f"count {count} outside 1..{MAX_COUNT[function_code]}")
    if not 0 <= start <= 0xFFFF or start + count > 0x10000:
        raise ValueError(f"start {start} and count {count} past address 65535")
    if not 0 <= unit <= 0xFF or not 0 <= tid <= 0xFFFF:
        raise ValueError(f"unit id {unit} or transaction id {tid} out of range")
    return _REQUEST.pack(tid, 0, 6, unit, function_code, start, count)


def frame_length(head: bytes | bytearray) -> int:
    """The whole frame's length from its first 6 bytes (MBAP header). Raises FrameError for a
    protocol id other than 0 or a length no read answer can have (under 3 or over 254)."""
    _tid, protocol, length = _HEAD.unpack_from(head)
    if protocol != 0:
        raise FrameError(f"protocol id {protocol} in the answer (Modbus is 0)")
    if not 3 <= length <= 254:
        raise FrameError(f"length {length} in the answer's header")
    return HEADER + int(length)


def parse_reply(frame: bytes, tid: int, unit: int, function_code: int) -> Reply:
    """The answer in ``frame`` (one whole frame, as :func:`frame_length` cut it) to request ``tid``."""
    if len(frame) < HEADER + 3:
        raise FrameError(f"a frame of {len(frame)} bytes")
    tid_seen, protocol, length, unit_seen, fc = _ANSWER_HEAD.unpack_from(frame)
    if tid_seen != tid:
        raise FrameError(f"transaction id {tid_seen} in the answer, {tid} asked")
    if protocol != 0 or length != len(frame) - HEADER:
        raise FrameError(f"protocol id {protocol}, length {length} in a frame of {len(frame)} bytes")
    if unit_seen != unit:
        raise FrameError(f"unit id {unit_seen} in the answer, {unit} asked")
    body = frame[HEADER + 2 :]
    if fc & 0x80:
        if len(body) != 1:
            raise FrameError(f"an exception answer of {len(body)} bytes")
        return Reply(fc, unit_seen, [], exception_code=body[0])
    byte_count = body[0]
    if byte_count != len(body) - 1:
        raise FrameError(f"byte count {byte_count} with {len(body) - 1} bytes after it")
    data = body[1:]
    if fc in BIT_CODES:
        return Reply(fc, unit_seen, [(b >> i) & 1 for b in data for i in range(8)])
    n, odd = divmod(byte_count, 2)
    values = list(struct.unpack_from(f">{n}H", data))
    problem = f"odd byte count {byte_count} ({byte_count / 2} registers)" if odd else None
    return Reply(fc, unit_seen, values, problem=problem)

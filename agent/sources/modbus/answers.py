"""What a Modbus answer must be before its registers are used, and one channel decoded from them.

Holds the exception and bad-response errors, the pure check of an answer against its request
and the decoding of a channel's registers. It must not do I/O or hold connection state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.config.sources import Channel
from agent.core.snapshot import ChannelRead
from agent.sources.modbus.decode import DecodeError, decode
from agent.sources.modbus.plan import BIT_TABLES, Block, take
from agent.sources.readings import channel_fields, channel_read

EXCEPTION_NAMES = {
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "device failure",
    6: "device busy",
    10: "gateway path unavailable",
    11: "gateway target failed to respond",
}
# What an operator should take from a code: 2 is the map's problem (misconfigured), 10 and 11 come
# from a Modbus TCP-to-RTU gateway and mean the device behind it cannot be read (unavailable).
EXCEPTION_MEANINGS = {
    2: "the device has no such register: check the register map",
    10: "the gateway has no path to this unit id: check the gateway's routing and the unit id",
    11: "the device behind the gateway did not answer it: the device is off or its line is cut",
}
GATEWAY_CODES = (10, 11)  # the device is unavailable, not one of its fields
READ_FUNCTIONS = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}


class ExceptionResponse(Exception):
    """The controller answered with a Modbus exception code (evidence, not a link failure)."""

    def __init__(self, block: Block, code: int) -> None:
        self.block, self.code = block, code
        name = EXCEPTION_NAMES.get(code, "exception")
        meaning = f": {EXCEPTION_MEANINGS[code]}" if code in EXCEPTION_MEANINGS else ""
        super().__init__(
            f"exception {code} ({name}) reading {block.table} {block.start}..{block.start + block.count - 1}"
            f"{meaning}"
        )


class BadResponse(ExceptionResponse):
    """A well-framed answer that does not answer the request (wrong quantity, unit or function):
    refused like an exception response, so the other channels are still read one by one."""

    def __init__(self, block: Block, problem: str) -> None:
        self.block, self.code = block, 0
        where = f"{block.table} {block.start}..{block.start + block.count - 1}"
        Exception.__init__(self, f"bad response reading {where}: {problem}")


def response_problem(
    block: Block, function_code: Any, unit_seen: Any, unit: int, values: Sequence[Any]
) -> str | None:
    """Why an answer to ``block`` is refused (None: it is fine). Pure; pymodbus checks the unit id
    only for unit != 0 and never the quantity, so both are checked here."""
    expected = READ_FUNCTIONS[block.table]
    if function_code != expected:
        return f"function code {function_code} in the answer to a request with function code {expected}"
    if unit_seen is not None and unit_seen != unit:
        return f"unit id {unit_seen} in the answer, {unit} asked"
    if block.table in BIT_TABLES:
        if not block.count <= len(values) < block.count + 8:
            return f"{len(values)} bits for {block.count} asked"
    elif len(values) != block.count:
        return f"{len(values)} registers for {block.count} asked"
    elif values and (min(values) < 0 or max(values) > 0xFFFF):
        return "a register value outside 0..65535"
    return None


def channel_from_registers(
    ch: Channel, got: Mapping[Block, Sequence[int]], word_order: str, error: str | None = None
) -> ChannelRead:
    """One channel from the registers read (pure): decode each field, then the shared rules of
    :func:`agent.sources.readings.channel_read` (identity strict, payload tolerant)."""
    values: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for name, f in channel_fields(ch):
        regs = take(got, f)
        if regs is None:
            continue
        try:
            values[name] = decode(regs, f.type, f.word_order or word_order)
        except DecodeError as exc:
            error = str(exc)
            continue
        raw[name] = {"register": f.register, "registers": list(regs)}
    if error:
        raw["error"] = error
    return channel_read(ch, values, raw)

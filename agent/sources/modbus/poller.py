"""Modbus TCP and RTU source (pymodbus 3.16): one client, one task, one tracker per connection.

Reads follow :mod:`agent.sources.modbus.plan`: the boot id and all channel fields in one
request where the map allows (the boot id read again after the other blocks otherwise), the
ring (header and slots) in one request, and only when the tracker needs it (first read, after
a reconnect, a boot change or a counter that moved by more than one). pymodbus' own
reconnect is off (``reconnect_delay=0``): its default waits up to 300 s after a long outage,
and our loop backs off with jitter and a cap instead (:func:`agent.sources.base.run_source`).

An exception response (e.g. 2, illegal data address) is not a link failure: the device's
fields are then read channel by channel for a while, so that one bad channel does not stop
the others, and each field's error is logged once per change. A request that gets no answer
within the timeout is a link failure (half-open link): the client is closed and reconnected.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pymodbus.client import AsyncModbusSerialClient, AsyncModbusTcpClient
from pymodbus.exceptions import ModbusException

from agent.config.sources import Channel, Device, Field, ModbusRtu, ModbusTcp
from agent.core.contract import format_timestamp
from agent.core.errors import SourceUnavailable
from agent.core.snapshot import ChannelRead, Observations, RingItem, RingRead, Snapshot
from agent.core.tracker import DeviceTracker
from agent.sources.base import StateLog
from agent.sources.modbus.decode import DecodeError, decode
from agent.sources.modbus.plan import BIT_TABLES, Block, Plan, plan_blocks, plan_reads, take
from agent.sources.readings import BadValue, boot_number, channel_fields, channel_read, ring_item

log = logging.getLogger(__name__)
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)  # it logs raw frames; we log what we catch

EXCEPTION_NAMES = {
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "device failure",
    6: "device busy",
    10: "gateway path unavailable",
    11: "gateway target failed to respond",
}
READ_FUNCTIONS = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}
SPLIT_FOR_S = 30.0
TORN_RETRIES = 3


class ExceptionResponse(Exception):
    """The controller answered with a Modbus exception code (evidence, not a link failure)."""

    def __init__(self, block: Block, code: int) -> None:
        self.block, self.code = block, code
        name = EXCEPTION_NAMES.get(code, "exception")
        super().__init__(
            f"exception {code} ({name}) reading {block.table} {block.start}..{block.start + block.count - 1}"
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
    elif any(not 0 <= v <= 0xFFFF for v in values):
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


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class ModbusSource:
    """One Modbus connection (TCP or RTU) of one device."""

    def __init__(
        self,
        device: Device,
        conn: ModbusTcp | ModbusRtu,
        *,
        clock: Callable[[], str] = _now,
        max_gap: int = 16,
    ) -> None:
        self.dev, self.conn, self.clock = device, conn, clock
        self.device, self.receiver = device.name, conn.receiver
        fields = [f for ch in device.channels for _, f in channel_fields(ch)]
        self.plan: Plan = plan_reads(device.boot_id, fields, max_gap=max_gap)
        self.channel_plans = [
            plan_blocks([f for _, f in channel_fields(ch)], max_gap=max_gap) for ch in device.channels
        ]
        self.ring_blocks = self._ring_blocks(max_gap)
        self.tracker = DeviceTracker(device.name, ring_mapped=device.ring is not None)
        self.client: Any = None
        self.split_until = 0.0
        self.errors = StateLog(log, f'Device "{device.name}" ({self.receiver} unit {conn.unit})')
        self.polls = 0

    def _ring_blocks(self, max_gap: int) -> tuple[Block, ...]:
        ring = self.dev.ring
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

    # --- Source protocol ---------------------------------------------------------------------

    async def connect(self) -> None:
        c = self.conn
        if isinstance(c, ModbusTcp):
            client: Any = AsyncModbusTcpClient(
                c.host, port=c.port, timeout=c.timeout, retries=0, reconnect_delay=0
            )
        else:
            client = AsyncModbusSerialClient(
                c.serial,
                baudrate=c.baudrate,
                parity=c.parity,
                stopbits=c.stopbits,
                bytesize=c.bytesize,
                timeout=c.timeout,
                retries=0,
                reconnect_delay=0,
            )
        self.client = client
        try:
            async with asyncio.timeout(c.timeout * 2):
                ok = await client.connect()
        except (TimeoutError, OSError, ModbusException) as exc:
            raise SourceUnavailable(f"cannot connect: {exc or type(exc).__name__}") from exc
        if not ok:
            raise SourceUnavailable("cannot connect (refused or unreachable)")
        self.tracker.reconnected()

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing a dead socket must never stop the loop
                log.debug("closing %s: %s", self.receiver, exc)

    async def wait(self, stop: asyncio.Event) -> None:
        """Sleep to the next multiple of the poll interval (no drift, no burst after a slow read)."""
        period = self.dev.poll
        delay = period - (time.monotonic() % period)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            return

    async def poll(self) -> Observations:
        self.polls += 1
        for _ in range(TORN_RETRIES):
            snap = await self.snapshot()
            if self.tracker.needs_ring(snap):
                snap = await self._with_ring(snap)
            obs = self.tracker.observe(snap)
            if not obs.torn:
                return obs
        return Observations(notes=("boot id changed during every read; trying again next poll",))

    async def probe(self) -> Snapshot:
        """One read of the whole map, ring included, without touching the tracker (``check --probe``)."""
        snap = await self.snapshot()
        return await self._with_ring(snap) if self.dev.ring is not None else snap

    # --- reading -----------------------------------------------------------------------------

    async def read_block(self, block: Block) -> list[int]:
        """One request. Raises ExceptionResponse (device said no) or SourceUnavailable (link)."""
        if self.client is None:
            raise SourceUnavailable("not connected")
        # Read-only on purpose: these four are the only requests this agent ever sends (function
        # codes 1-4); nothing here can write to a controller.
        fn = {
            "holding": self.client.read_holding_registers,
            "input": self.client.read_input_registers,
            "coil": self.client.read_coils,
            "discrete": self.client.read_discrete_inputs,
        }[block.table]
        try:
            async with asyncio.timeout(self.conn.timeout + 0.5):
                rr = await fn(block.start, count=block.count, device_id=self.conn.unit)
        except TimeoutError as exc:
            raise SourceUnavailable(f"read timed out after {self.conn.timeout * 1000:.0f} ms") from exc
        except (ModbusException, OSError, struct.error, ValueError, IndexError) as exc:
            # pymodbus raises ModbusIOException for a wrong unit id or transaction id, and lets
            # struct.error through for a truncated frame: the stream can no longer be trusted.
            raise SourceUnavailable(f"read failed: {exc or type(exc).__name__}") from exc
        if rr.isError():
            raise ExceptionResponse(block, int(getattr(rr, "exception_code", 0)))
        values = list(rr.bits if block.table in BIT_TABLES else rr.registers)
        problem = response_problem(
            block, getattr(rr, "function_code", None), getattr(rr, "dev_id", None), self.conn.unit, values
        )
        if problem is not None:
            raise BadResponse(block, problem)
        return [int(v) for v in values[: block.count]]

    async def _read_all(self, blocks: Sequence[Block]) -> tuple[dict[Block, list[int]], dict[Block, str]]:
        got: dict[Block, list[int]] = {}
        failed: dict[Block, str] = {}
        for b in blocks:
            try:
                got[b] = await self.read_block(b)
            except ExceptionResponse as exc:
                failed[b] = str(exc)
        return got, failed

    async def snapshot(self) -> Snapshot:
        split = time.monotonic() < self.split_until
        if not split:
            got, failed = await self._read_all(self.plan.blocks)
            if failed:
                first = next(iter(failed.values()))
                self.errors.set("read", f"{first}; reading channel by channel")
                self.split_until = time.monotonic() + SPLIT_FOR_S
                split = True
            else:
                self.errors.set("read", None)
        boots: list[str | None] = []
        boot_error: str | None = None
        channel_errors: dict[str, str] = {}
        if split:
            got = {}
            if self.plan.boot is not None:
                boot_got, boot_failed = await self._read_all([self.plan.boot])
                got.update(boot_got)
                boot_error = next(iter(boot_failed.values()), None)
            for ch, blocks in zip(self.dev.channels, self.channel_plans, strict=True):
                ch_got, ch_failed = await self._read_all(blocks)
                got.update(ch_got)
                if ch_failed:
                    channel_errors[ch.name] = next(iter(ch_failed.values()))
        boot = self._boot_value(got)
        boots.append(boot)
        if self.plan.boot is not None and (split or self.plan.recheck_boot):
            again, again_failed = await self._read_all([self.plan.boot])
            boots.append(self._boot_value(again) if not again_failed else None)
        self.errors.set("boot id", boot_error)
        reads = tuple(self._channel(ch, got, channel_errors.get(ch.name)) for ch in self.dev.channels)
        where: dict[str, Any] = {}
        if self.dev.boot_id is not None:
            where = {"register": self.dev.boot_id.register, "table": self.dev.boot_id.table}
        return Snapshot(
            device=self.device,
            receiver=self.receiver,
            read_at=self.clock(),
            boot_id=boot,
            channels=reads,
            boot_reads=tuple(boots) if len(boots) > 1 else (),
            boot_where=where,
            boot_error=boot_error,
        )

    def _word_order(self, f: Field) -> str:
        return f.word_order or self.dev.word_order

    def _boot_value(self, got: Mapping[Block, Sequence[int]]) -> str | None:
        f = self.dev.boot_id
        if f is None:
            return None
        regs = take(got, f)
        if regs is None:
            return None
        try:  # 0 or all ones = not set: no generation is made up
            return boot_number(decode(regs, f.type, self._word_order(f)), bits=16 * f.words)
        except (BadValue, DecodeError):
            return None

    def _channel(self, ch: Channel, got: Mapping[Block, Sequence[int]], error: str | None) -> ChannelRead:
        read = channel_from_registers(ch, got, self.dev.word_order, error)
        self.errors.set(f"channel {ch.name}", read.error)
        self.errors.set(f"channel {ch.name} values", "; ".join(read.raw.get("flags", ())) or None)
        return read

    async def _with_ring(self, snap: Snapshot) -> Snapshot:
        ring = self.dev.ring
        assert ring is not None
        got, failed = await self._read_all(self.ring_blocks)
        if failed:
            error = next(iter(failed.values()))
            self.errors.set("ring", error)
            return replace(snap, ring_error=error)
        self.errors.set("ring", None)
        head_regs = take(got, ring.head)
        if head_regs is None:
            return replace(snap, ring_error="ring head not read")
        capacity = ring.capacity.value or ring.slot_count
        try:
            head = int(decode(head_regs, ring.head.type, self._word_order(ring.head)))
            if ring.capacity.register is not None and (cap_regs := take(got, ring.capacity)) is not None:
                order = self._word_order(ring.capacity)
                capacity = int(decode(cap_regs, ring.capacity.type, order)) or capacity
        except (DecodeError, ValueError, OverflowError) as exc:  # a float head: NaN/Inf
            return replace(snap, ring_error=f"ring header refused: {exc}")
        entries: list[RingItem] = []
        assert ring.slots_register is not None and ring.slot_size is not None
        for k in range(min(capacity, ring.slot_count)):
            base = ring.slots_register + k * ring.slot_size
            values: dict[str, Any] = {}
            for name, f in ring.fields.items():
                regs = take(got, replace(f, register=base + (f.offset or 0)))
                if regs is not None:
                    values[name] = decode(regs, f.type, self._word_order(f))
            item = ring_item(self.dev, values)
            if item is not None:
                entries.append(item)
        return replace(snap, ring=RingRead(head, capacity, tuple(entries)))

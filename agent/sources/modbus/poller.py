"""Modbus TCP (our own client) and RTU (pymodbus) source: one client, one task, one tracker each.

Holds :class:`ModbusSource`: connect, read the planned blocks and the ring, close. It must not
send anything but the four read function codes (1-4): nothing here can write to a controller.

Reads follow :mod:`agent.sources.modbus.plan`: the boot id and all channel fields in one
request where the map allows (the boot id read again after the other blocks otherwise), the
ring (header and slots, :mod:`agent.sources.modbus.ring`) in one request, and only when the
tracker needs it (first read, after a reconnect, a boot change or a counter that moved by more
than one). Modbus TCP uses :mod:`agent.sources.modbus.tcp_client` (our own: the same reads at
about 0.6 of pymodbus' CPU per request, issue 35, docs/performance.md); RTU stays on pymodbus,
whose own reconnect is off (``reconnect_delay=0``: its default waits up to 300 s after a long
outage). Neither retries or reconnects by itself: our loop backs off with jitter and a cap
(:func:`agent.sources.base.run_source`).

A poll whose registers are exactly those of the last poll on the same connection (boot id,
fields, the boot id read again) adds nothing when the tracker said it was settled after that
poll (no ring read due): nothing is decoded or observed then. A reconnect, a failed or split
read, or any changed register gives a full read and observation.

An exception response (e.g. 2, illegal data address) is not a link failure: the device's
fields are then read channel by channel for a while, so that one bad channel does not stop
the others, and each field's error is logged once per change. A request that gets no answer
within the timeout is a link failure (half-open link): the client is closed and reconnected.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pymodbus.client import AsyncModbusSerialClient
from pymodbus.exceptions import ModbusException

from agent.config.sources import Channel, Device, ModbusRtu, ModbusTcp
from agent.core.errors import SourceUnavailable
from agent.core.snapshot import ChannelRead, Observations, RingRead, Snapshot
from agent.core.timestamps import format_timestamp
from agent.core.tracker import DeviceTracker, Resume
from agent.sources.base import StateLog
from agent.sources.modbus.answers import (
    GATEWAY_CODES,
    READ_FUNCTIONS,
    BadResponse,
    ExceptionResponse,
    channel_from_registers,
    response_problem,
)
from agent.sources.modbus.decode import DecodeError
from agent.sources.modbus.field_reads import FieldReads, boot_value
from agent.sources.modbus.frames import BIT_CODES, FrameError, Reply
from agent.sources.modbus.plan import BIT_TABLES, Block, Plan, plan_blocks, plan_reads, take
from agent.sources.modbus.ring import ring_blocks, ring_entries, ring_header
from agent.sources.modbus.tcp_client import ModbusTcpClient
from agent.sources.readings import channel_fields
from agent.sources.schedule import BOOK, Pacer, next_tick

log = logging.getLogger(__name__)
NOTHING = Observations()  # what a poll that read exactly what the last one read adds
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)  # it logs raw frames; we log what we catch

SPLIT_FOR_S = 30.0
TORN_RETRIES = 3
# The RTU client's read method of each table: the only requests this agent ever sends (function
# codes 1-4; the TCP client, agent.sources.modbus.tcp_client, sends nothing else).
_READ_OF = {
    "holding": "read_holding_registers",
    "input": "read_input_registers",
    "coil": "read_coils",
    "discrete": "read_discrete_inputs",
}


def _reply_of(rr: Any) -> Reply:
    """A pymodbus (RTU) response as our own :class:`Reply` (bits not cut: checked as they came)."""
    fc = int(getattr(rr, "function_code", 0) or 0)
    unit = getattr(rr, "dev_id", None)
    if rr.isError():
        return Reply(fc, unit, [], exception_code=int(getattr(rr, "exception_code", 0)))
    values = rr.bits if fc in BIT_CODES else rr.registers
    return Reply(fc, unit, [int(v) for v in values])


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
        resume: Resume | None = None,
    ) -> None:
        self.dev, self.conn, self.clock = device, conn, clock
        self.device, self.receiver = device.name, conn.receiver
        fields = [f for ch in device.channels for _, f in channel_fields(ch)]
        self.plan: Plan = plan_reads(device.boot_id, fields, max_gap=max_gap)
        self.channel_plans = [
            plan_blocks([f for _, f in channel_fields(ch)], max_gap=max_gap) for ch in device.channels
        ]
        self.ring_blocks = ring_blocks(device)
        self.tracker = DeviceTracker(device.name, ring_mapped=device.ring is not None, resume=resume)
        self.client: Any = None
        self.split_until = 0.0
        self.errors = StateLog(log, f'Device "{device.name}" ({self.receiver} unit {conn.unit})')
        self.polls = 0
        # Its slot in the poll interval (agent.sources.schedule), given back by `release`.
        self.slot = BOOK.take(device.poll)
        self.phase = self.slot.phase
        self.pacer = Pacer()
        # The registers of the last poll on this connection after which the tracker was settled.
        self._same: list[list[int] | None] | None = None
        # The plan's one request, when one request holds the boot id and every field (no boot id
        # read again): the poll of an unchanged answer is then that request and one comparison.
        one = len(self.plan.blocks) == 1 and not self.plan.recheck_boot
        self._one: Block | None = self.plan.blocks[0] if one else None

    # --- Source protocol ---------------------------------------------------------------------

    def _new_client(self) -> Any:
        """A TCP or serial client without pymodbus' own retries and reconnect."""
        c = self.conn
        if isinstance(c, ModbusTcp):  # our own (issue 35): the TCP reads at a fraction of the CPU
            return ModbusTcpClient(c.host, port=c.port, timeout=c.timeout)
        return AsyncModbusSerialClient(
            c.serial,
            baudrate=c.baudrate,
            parity=c.parity,
            stopbits=c.stopbits,
            bytesize=c.bytesize,
            timeout=c.timeout,
            retries=0,
            reconnect_delay=0,
        )

    async def connect(self) -> None:
        c = self.conn
        client = self.client = self._new_client()
        try:
            async with asyncio.timeout(c.timeout * 2):
                ok = await client.connect()
        except (TimeoutError, OSError, ModbusException) as exc:
            raise SourceUnavailable(f"cannot connect: {exc or type(exc).__name__}") from exc
        except termios.error as exc:  # a serial line that refuses the settings (not an OSError)
            raise SourceUnavailable(f"cannot configure the serial line ({self._line()}): {exc}") from exc
        if not ok:
            if isinstance(c, ModbusRtu):
                raise SourceUnavailable(f"cannot open the serial line ({self._line()})")
            raise SourceUnavailable("cannot connect (refused or unreachable)")
        self._same = None
        self.tracker.reconnected()

    def _line(self) -> str:
        c = self.conn
        if not isinstance(c, ModbusRtu):
            return ""
        return f"{c.serial}, {c.baudrate} baud, {c.bytesize}{c.parity}{c.stopbits}"

    def release(self) -> None:
        """Give the slot back (the device stopped for good: removed, or restarted by a reload)."""
        BOOK.give_back(self.slot)

    async def close(self) -> None:
        self._same = None
        self.pacer.drop()
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing a dead socket must never stop the loop
                log.debug("closing %s: %s", self.receiver, exc)

    async def wait(self, stop: asyncio.Event) -> None:
        """Sleep to this connection's next tick (its phase over the poll interval), or until stop:
        one future, the timer shared with its slot (:class:`agent.sources.schedule.Pacer`)."""
        tick = self.pacer.tick(next_tick(self.dev.poll, self.phase, time.monotonic()), stop)
        if tick is not None:
            await tick

    async def poll(self) -> Observations:
        """Read and observe once. Registers equal to those of the last poll on this connection,
        after which the tracker was settled, cannot hold anything new: nothing is decoded then."""
        self.polls += 1
        ahead: FieldReads | None = None
        one, same = self._one, self._same
        if one is not None and same is not None and time.monotonic() >= self.split_until:
            # `_read_fields` for a plan of one request, in one step (the "read" state is fine
            # when `same` is kept: it is kept only after such a read).
            try:
                regs = await self.read_block(one)
            except ExceptionResponse as exc:
                ahead = await self._refused({one: str(exc)})
            else:
                if regs == same[0]:
                    return NOTHING
                self.errors.set("read", None)
                ahead = FieldReads({one: regs})
        for _ in range(TORN_RETRIES):
            if ahead is not None:
                fields, again, ahead = ahead, None, None
            else:
                fields, again = await self._read()
            same = None if fields.split else [*fields.got.values(), again]
            if same is not None and same == self._same:
                return NOTHING
            snap = self._snapshot_of(fields, again)
            if self.tracker.needs_ring(snap):
                snap = await self._with_ring(snap)
            obs = self.tracker.observe(snap)
            if not obs.torn:
                self._same = same if same is not None and self.tracker.settled(snap) else None
                return obs
            self._same = None
        return Observations(notes=("boot id changed during every read; trying again next poll",))

    async def probe(self) -> Snapshot:
        """One read of the whole map, ring included, without touching the tracker (``check --probe``)."""
        snap = await self.snapshot()
        return await self._with_ring(snap) if self.dev.ring is not None else snap

    # --- reading -----------------------------------------------------------------------------

    async def read_block(self, block: Block) -> list[int]:
        """One request. Raises ExceptionResponse (device said no) or SourceUnavailable (link)."""
        client = self.client
        if client is None:
            raise SourceUnavailable("not connected")
        # Read-only on purpose: these four are the only requests this agent ever sends (function
        # codes 1-4); nothing here can write to a controller.
        expected = READ_FUNCTIONS[block.table]
        # No timer of our own per request: either client waits at most `timeout` for the answer
        # (no retries) and then raises: a link failure.
        try:
            if isinstance(client, ModbusTcpClient):
                rr = await client.read(expected, block.start, block.count, self.conn.unit)
            else:
                fn = getattr(client, _READ_OF[block.table])
                rr = _reply_of(await fn(block.start, count=block.count, device_id=self.conn.unit))
        except (FrameError, ModbusException, OSError, struct.error, ValueError, IndexError) as exc:
            # No answer in time, the connection closed, a frame that is not the answer (another
            # transaction or unit id, a truncated or garbage frame; pymodbus raises
            # ModbusIOException or lets struct.error through): the stream can no longer be trusted.
            raise SourceUnavailable(f"read failed: {exc or type(exc).__name__}") from exc
        if rr.exception_code is not None and rr.function_code == expected | 0x80:
            refused = ExceptionResponse(block, rr.exception_code)
            if refused.code in GATEWAY_CODES:  # the device behind a gateway: unavailable as a whole
                raise SourceUnavailable(str(refused))
            raise refused
        values = rr.values
        problem = response_problem(block, rr.function_code, rr.unit, self.conn.unit, values) or rr.problem
        if problem is not None:
            raise BadResponse(block, problem)
        # Registers: exactly `count` whole numbers in 0..65535 (checked above); bits cut to `count`.
        return values[: block.count] if block.table in BIT_TABLES else values

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
        """The boot id and every channel; the boot id read again when the fields took several requests."""
        return self._snapshot_of(*await self._read())

    async def _read(self) -> tuple[FieldReads, list[int] | None]:
        """The fields, and the boot id's registers read again after them (None: not read again,
        or refused) when the fields took several requests."""
        fields = await self._read_fields()
        again = None
        if self.plan.boot is not None and (fields.split or self.plan.recheck_boot):
            got, _ = await self._read_all([self.plan.boot])
            again = got.get(self.plan.boot)
        return fields, again

    def _snapshot_of(self, fields: FieldReads, again: list[int] | None) -> Snapshot:
        boot = boot_value(self.dev, fields.got)
        boots = [boot]
        if self.plan.boot is not None and (fields.split or self.plan.recheck_boot):
            boots.append(boot_value(self.dev, {self.plan.boot: again}) if again is not None else None)
        self.errors.set("boot id", fields.boot_error)
        reads = tuple(
            self._channel(ch, fields.got, fields.channel_errors.get(ch.name)) for ch in self.dev.channels
        )
        return Snapshot(
            device=self.device,
            receiver=self.receiver,
            read_at=self.clock(),
            boot_id=boot,
            channels=reads,
            boot_reads=tuple(boots) if len(boots) > 1 else (),
            boot_where=self._boot_where(),
            boot_error=fields.boot_error,
        )

    async def _read_fields(self) -> FieldReads:
        """The planned blocks; after an exception response, channel by channel for a while."""
        if time.monotonic() >= self.split_until:
            got, failed = await self._read_all(self.plan.blocks)
            if not failed:
                self.errors.set("read", None)
                return FieldReads(got)
            return await self._refused(failed)
        return await self._read_split()

    async def _refused(self, failed: dict[Block, str]) -> FieldReads:
        """After an exception response to the plan: channel by channel for a while."""
        first = next(iter(failed.values()))
        self.errors.set("read", f"{first}; reading channel by channel")
        self.split_until = time.monotonic() + SPLIT_FOR_S
        return await self._read_split()

    async def _read_split(self) -> FieldReads:
        """The boot id, then each channel on its own: one refused field fails only its channel."""
        out = FieldReads(split=True)
        if self.plan.boot is not None:
            boot_got, boot_failed = await self._read_all([self.plan.boot])
            out.got.update(boot_got)
            out.boot_error = next(iter(boot_failed.values()), None)
        for ch, blocks in zip(self.dev.channels, self.channel_plans, strict=True):
            ch_got, ch_failed = await self._read_all(blocks)
            out.got.update(ch_got)
            if ch_failed:
                out.channel_errors[ch.name] = next(iter(ch_failed.values()))
        return out

    def _boot_where(self) -> dict[str, Any]:
        if self.dev.boot_id is None:
            return {}
        return {"register": self.dev.boot_id.register, "table": self.dev.boot_id.table}

    def _channel(self, ch: Channel, got: Mapping[Block, Sequence[int]], error: str | None) -> ChannelRead:
        read = channel_from_registers(ch, got, self.dev.word_order, error)
        self.errors.set(f"channel {ch.name}", read.error)
        self.errors.set(f"channel {ch.name} values", "; ".join(read.raw.get("flags", ())) or None)
        return read

    async def _with_ring(self, snap: Snapshot) -> Snapshot:
        """``snap`` with the ring (header and slots, one request where the map allows) or its error."""
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
        try:
            head, capacity = ring_header(self.dev, got, head_regs)
        except (DecodeError, ValueError, OverflowError) as exc:  # a float head: NaN/Inf
            return replace(snap, ring_error=f"ring header refused: {exc}")
        return replace(snap, ring=RingRead(head, capacity, ring_entries(self.dev, got, capacity)))

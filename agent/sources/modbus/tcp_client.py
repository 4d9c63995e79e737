"""A minimal asyncio Modbus TCP client of our own: the four reads (function codes 1-4), nothing else.

Our code in place of pymodbus' AsyncModbusTcpClient for Modbus TCP only, because it pays (issue 35,
docs/performance.md: CPU per request measured against pymodbus'); RTU stays on pymodbus. One
request in flight per connection (the poller awaits each), a timeout per request, no retries and
no reconnect of its own (the poller's loop does that). Anything the stream cannot be trusted after
(no answer in time, the connection closed mid-request, bytes nobody asked for, a frame that is not
the answer, :class:`agent.sources.modbus.frames.FrameError`) raises, and the client refuses every
later read: the caller closes it and connects a new one.
"""

from __future__ import annotations

import asyncio
import logging

from agent.sources.modbus.frames import HEADER, FrameError, Reply, build_request, frame_length, parse_reply

log = logging.getLogger(__name__)


class NoAnswer(TimeoutError):
    """No whole answer within the timeout."""


class _Link(asyncio.Protocol):
    """The connection's bytes, cut into frames for the one request waiting."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.broken: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            self._break(FrameError(f"{len(buf)} bytes nobody asked for"))
            return
        if len(buf) < HEADER:
            return
        try:
            n = frame_length(buf)
        except FrameError as exc:
            self._break(exc)
            return
        if len(buf) < n:
            return
        if len(buf) > n:
            self._break(FrameError(f"{len(buf) - n} bytes after the answer"))
            return
        frame = bytes(buf)
        buf.clear()
        waiter.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._break(ConnectionError(f"connection closed{f': {exc}' if exc else ''}"))

    def _break(self, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = exc
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[bytes], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(NoAnswer(f"no answer within {timeout:g} s"))


class ModbusTcpClient:
    """One Modbus TCP connection: ``connect``, the four reads, ``close``."""

    def __init__(self, host: str, *, port: int = 502, timeout: float = 1.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._link: _Link | None = None
        self._tid = 0

    async def connect(self) -> bool:
        """Open the connection; False when it is refused or unreachable."""
        loop = asyncio.get_running_loop()
        try:
            _, link = await loop.create_connection(_Link, self.host, self.port)
        except OSError as exc:
            log.debug("connecting to %s:%s: %s", self.host, self.port, exc)
            return False
        self._link = link
        return True

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.close()

    async def read(self, function_code: int, start: int, count: int, unit: int) -> Reply:
        """One read and its answer. Raises FrameError, NoAnswer or ConnectionError (not trusted)."""
        link = self._link
        if link is None or link.transport is None:
            raise ConnectionError("not connected")
        if link.broken is not None:
            raise ConnectionError(f"the connection is not trusted: {link.broken}")
        if link.waiter is not None:
            raise RuntimeError("one request at a time on a Modbus TCP connection")
        self._tid = tid = (self._tid + 1) & 0xFFFF
        request = build_request(tid, unit, function_code, start, count)
        loop = asyncio.get_running_loop()
        waiter = link.waiter = loop.create_future()
        timer = loop.call_later(self.timeout, _expire, waiter, self.timeout)
        try:
            link.transport.write(request)
            frame = await waiter
        except NoAnswer as exc:
            link._break(exc)  # a late answer must not be taken for the next one
            raise
        finally:
            timer.cancel()
            link.waiter = None
        try:
            return parse_reply(frame, tid, unit, function_code)
        except FrameError as exc:
            link._break(exc)
            raise

    async def read_coils(self, start: int, count: int = 1, device_id: int = 1) -> Reply:
        return await self.read(1, start, count, device_id)

    async def read_discrete_inputs(self, start: int, count: int = 1, device_id: int = 1) -> Reply:
        return await self.read(2, start, count, device_id)

    async def read_holding_registers(self, start: int, count: int = 1, device_id: int = 1) -> Reply:
        return await self.read(3, start, count, device_id)

    async def read_input_registers(self, start: int, count: int = 1, device_id: int = 1) -> Reply:
        return await self.read(4, start, count, device_id)

"""A hostile Modbus TCP server: well-framed answers that do not answer the request (tests only).

Plain asyncio over TCP (pymodbus' server only sends correct answers). Each ``mode`` breaks one
thing an agent must check itself, because pymodbus 3.16 does not:

=========== ====================================================================================
ok          a correct answer (every register 1)
short       half the registers asked for (a byte count that matches the frame)
long        two registers more than asked
function    the answer to function 3 carries function 4
unit        another unit id than asked (pymodbus drops it itself: the request times out)
odd         a byte count of 3: one and a half registers
=========== ====================================================================================

Every request's function code is recorded in ``function_codes``.
"""

from __future__ import annotations

import asyncio
import struct
from typing import cast

MODES = ("ok", "short", "long", "function", "unit", "odd")


class HostileModbusServer:
    def __init__(self, mode: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        self.mode, self.host, self.port = mode, host, port
        self.function_codes: set[int] = set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(cast(tuple[str, int], self._server.sockets[0].getsockname())[1])

    async def stop(self) -> None:
        if self._server is not None:
            for w in list(self._writers):  # handlers end on EOF, not by cancellation
                w.close()
            await asyncio.sleep(0)
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readexactly(7)
                tid, _, length, unit = struct.unpack(">HHHB", head)
                pdu = await reader.readexactly(length - 1)
                writer.write(self.answer(tid, unit, pdu))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def answer(self, tid: int, unit: int, pdu: bytes) -> bytes:
        fc, _address, count = struct.unpack(">BHH", pdu[:5])
        self.function_codes.add(fc)
        if fc in (1, 2):
            data = b"\x01" * ((count + 7) // 8)
        else:
            n = {"short": count // 2, "long": count + 2}.get(self.mode, count)
            data = struct.pack(f">{n}H", *([1] * n))
            if self.mode == "odd":
                data = b"\x00\x01\x00"
        if self.mode == "function":
            fc = 4 if fc == 3 else 3
        if self.mode == "unit":
            unit = (unit + 1) % 256
        body: bytes = struct.pack(">BBB", unit, fc, len(data)) + data
        head: bytes = struct.pack(">HHH", tid, 0, len(body))
        return head + body

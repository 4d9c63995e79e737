"""A Modbus TCP server (pymodbus 3.16 SimDevice API) serving one controller's register map.

Consistency: every :meth:`ModbusSimServer.sync` writes the changed span of the register
image in **one** ``async_setValues`` call. pymodbus serves a read request and our write on
the same event loop without awaiting in between, so one read request always sees either
the whole change or none of it (the notes' "one call is atomic" rule).

Faults, all on 127.0.0.1 and without patching pymodbus:

* link cut: shut the listener down (pymodbus closes every connection with it) and listen
  again later on the same port, so connects are refused meanwhile;
* half-open: the ``action=`` hook awaits an event that is cleared, so the TCP session stays
  up and requests are never answered until the link is restored;
* slow responses: the hook sleeps before answering;
* exception responses: the hook returns an ``ExcCodes`` for requests touching a range;
* restart: connections drop, the model gets a new boot id, the same port listens again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, cast

from pymodbus.constants import ExcCodes
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from devices.controller import Controller
from devices.modbus_map import RegisterMap, WordOrder

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

READ_HOLDING = 3


@dataclass(frozen=True)
class ExceptionRange:
    """Requests overlapping ``[start, start + count)`` get exception ``code`` (2 = illegal data address)."""

    start: int
    count: int
    code: int = int(ExcCodes.ILLEGAL_ADDRESS)

    def overlaps(self, address: int, count: int) -> bool:
        return address < self.start + self.count and self.start < address + count


class ModbusSimServer:
    """One controller on its own host:port and unit id, like a PLC's Ethernet port."""

    def __init__(
        self,
        controller: Controller,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        unit: int = 1,
        word_order: WordOrder = "big",
    ) -> None:
        self.controller = controller
        self.map = RegisterMap(controller, word_order)
        self.host, self.port, self.unit = host, port, unit
        self.delay = 0.0
        self.exceptions: list[ExceptionRange] = []
        self._answering = asyncio.Event()
        self._answering.set()
        self._server: Any = None
        self._image: list[int] = []
        self._synced_version = -1
        self.function_codes: set[int] = set()  # of client requests (tests: the agent only reads)
        self.accepted = 0  # connections accepted since the first start (tests: was one ever reopened?)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def connection_count(self) -> int:
        return 0 if self._server is None else len(self._server.active_connections)

    async def start(self) -> None:
        """Listen (port 0 picks a free port, kept for every later restart) and load the whole image."""
        if self._server is not None:
            return
        first = self.map.first_register
        device = SimDevice(
            self.unit,
            [SimData(first, count=self.map.end - first, values=0, datatype=DataType.REGISTERS)],
            action=self._action,
        )
        server = ModbusTcpServer(device, address=(self.host, self.port))
        accept: Any = server.callback_new_connection  # looked up on each connection (handle_new_connection)

        def counted() -> Any:
            self.accepted += 1
            return accept()

        server.callback_new_connection = counted  # type: ignore[method-assign]
        await server.serve_forever(background=True)
        self._server = server
        self.port = int(cast(Any, server.transport).sockets[0].getsockname()[1])
        self._image = [0] * self.map.end
        self._synced_version = -1
        await self.sync()

    async def stop(self) -> None:
        """Stop listening and drop every connection; hung requests are released first."""
        self._answering.set()
        server, self._server = self._server, None
        if server is not None:
            await server.shutdown()

    async def sync(self) -> None:
        """Bring the registers in line with the model: the changed span, in one write."""
        if self._server is None or self._synced_version == self.controller.version:
            return
        new = self.map.encode()
        changed = [i for i in range(self.map.first_register, len(new)) if new[i] != self._image[i]]
        if changed:
            lo, hi = changed[0], changed[-1] + 1
            await self._server.async_setValues(self.unit, READ_HOLDING, lo, new[lo:hi])
        self._image = new
        self._synced_version = self.controller.version

    async def cut_link(self) -> None:
        """Close every connection and refuse new ones until :meth:`restore_link`."""
        await self.stop()

    async def restore_link(self) -> None:
        """End a cut or a half-open link: listen again on the same port, answer again."""
        self._answering.set()
        await self.start()

    async def cut_for(self, seconds: float) -> None:
        await self.cut_link()
        await asyncio.sleep(seconds)
        await self.restore_link()

    def half_open(self) -> None:
        """Keep TCP sessions up but stop answering (a frozen PLC, an unplugged cable behind a switch)."""
        self._answering.clear()

    def set_delay(self, seconds: float) -> None:
        """Answer every request ``seconds`` late (0 to answer at once again)."""
        self.delay = seconds

    def add_exception(self, start: int, count: int = 1, code: int = int(ExcCodes.ILLEGAL_ADDRESS)) -> None:
        self.exceptions.append(ExceptionRange(start, count, code))

    def clear_exceptions(self) -> None:
        self.exceptions.clear()

    async def restart(self, *, down_seconds: float = 0.0, clock_jump_ms: int = 0) -> int | None:
        """Reboot the controller: connections drop, new boot id, same port. Returns the new boot id."""
        await self.stop()
        boot_id = self.controller.restart(clock_jump_ms=clock_jump_ms)
        if down_seconds:
            await asyncio.sleep(down_seconds)
        await self.start()
        return boot_id

    async def _action(
        self,
        func_code: int,
        _start: int,
        address: int,
        count: int,
        _registers: list[int],
        set_values: list[int] | list[bool] | None,
    ) -> ExcCodes | None:
        # Our own sync() comes through here too (fc 3 with values, which no client request
        # has): it must never hang, sleep or fail, or the image would fall behind the model.
        if func_code == READ_HOLDING and set_values is not None:
            return None
        self.function_codes.add(func_code)
        await self._answering.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if set_values is not None:
            return ExcCodes.ILLEGAL_FUNCTION  # the map is read-only, as a PLC's status area is
        for rng in self.exceptions:
            if rng.overlaps(address, count):
                return ExcCodes(rng.code)
        return None

"""Modbus servers no one here wrote, serving a :class:`devices.controller.Controller`'s registers.

* :class:`LibmodbusRtu`: ``peers/libmodbus/rtu_server.c`` (libmodbus, Debian's ``libmodbus-dev``),
  compiled on first use, on one end of a serial line made by ``socat`` (a pty pair,
  :class:`PtyPair`); the agent opens the other end.
* :class:`ModbusSerialTcp`: ``peers/node/modbus_tcp_server.js`` (npm ``modbus-serial``'s
  ``ServerTCP``), the shape of a Modbus TCP-to-RTU gateway, for exception answers (0x0A, 0x0B, 0x02).

Both speak one stdin protocol (``regs``, ``exception``, ``clear``; the RTU one also ``garble``
and ``drop``): :meth:`PeerModbus.sync` writes the controller's whole register image
(:class:`devices.modbus_map.RegisterMap`) in one command, which the server applies between two
requests, so a read sees all of a change or none of it. A pty pair carries bytes only: baud
rate, parity and stop bits are configured on both ends but not simulated electrically.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from devices.controller import Controller
from devices.modbus_map import RegisterMap
from devices.peers import NODE_DIR, ROOT

RTU_SOURCE = ROOT / "peers" / "libmodbus" / "rtu_server.c"
TCP_SCRIPT = NODE_DIR / "modbus_tcp_server.js"


def libmodbus_missing() -> str | None:
    """Why the libmodbus RTU peer cannot run here, or None."""
    for tool, package in (("socat", "socat"), ("cc", "gcc"), ("pkg-config", "pkg-config")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    probe = subprocess.run(["pkg-config", "--exists", "libmodbus"], check=False)
    if probe.returncode != 0:
        return "libmodbus is not installed (apt-get install libmodbus-dev)"
    return None


def build_rtu_server(cache: Path) -> Path:
    """The compiled server, built into ``cache`` once per version of its source."""
    digest = hashlib.sha256(RTU_SOURCE.read_bytes()).hexdigest()[:12]
    binary = cache / f"rtu_server-{digest}"
    if not binary.exists():
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libmodbus"], check=True, capture_output=True, text=True
        ).stdout.split()
        cache.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(f".{os.getpid()}")
        subprocess.run(["cc", "-O1", "-o", str(tmp), str(RTU_SOURCE), *flags], check=True)
        tmp.replace(binary)  # atomic: parallel test workers may build it at once
    return binary


class PtyPair:
    """A serial line: two ptys joined by socat. ``agent_end`` for the agent, ``plc_end`` for the PLC."""

    def __init__(self, where: Path) -> None:
        self.agent_end, self.plc_end = str(where / "agent-tty"), str(where / "plc-tty")
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "socat",
            f"pty,raw,echo=0,link={self.agent_end}",
            f"pty,raw,echo=0,link={self.plc_end}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        async with asyncio.timeout(10):
            while not (os.path.exists(self.agent_end) and os.path.exists(self.plc_end)):
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        await _kill(self.proc)
        self.proc = None


async def _kill(proc: asyncio.subprocess.Process | None) -> None:
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)  # a stopped process must run to die
            proc.kill()
        await proc.wait()


class PeerModbus:
    """One peer server process serving ``controller`` (unit 1), driven over stdin."""

    def __init__(self, controller: Controller, argv: list[str]) -> None:
        self.controller, self.argv = controller, argv
        self.map = RegisterMap(controller)
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        ready = await self._line()
        if not ready.startswith("READY"):
            raise RuntimeError(f"{self.argv[0]} did not start: {ready}")
        if ready.startswith("READY "):
            self.port = int(ready.split()[1])
        await self.sync()

    async def stop(self) -> None:
        await _kill(self.proc)
        self.proc = None

    async def _line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(30):
            while True:
                line = (await self.proc.stdout.readline()).decode().strip()
                if not line and self.proc.stdout.at_eof():
                    raise RuntimeError(f"{self.argv[0]} ended")
                if line.startswith(("READY", "OK", "ERROR", "FAILED", "COUNT")):
                    return line

    async def command(self, text: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None
        async with self._lock:
            self.proc.stdin.write(text.encode() + b"\n")
            await self.proc.stdin.drain()
            answer = await self._line()
        if not answer.startswith(("OK", "COUNT")):
            raise RuntimeError(f"{text!r}: {answer}")
        return answer

    async def sync(self) -> None:
        """The controller's register image, written in one command (one consistent change)."""
        await self.command("regs 0 " + " ".join(str(v) for v in self.map.encode()))

    async def transition(self, channel: str) -> None:
        self.controller.transition(channel)
        await self.sync()

    async def add_exception(self, start: int, count: int, code: int) -> None:
        await self.command(f"exception {start} {count} {code}")

    async def clear(self) -> None:
        await self.command("clear")

    def pause(self) -> None:
        """The PLC stops answering (unplugged): its process is stopped; :meth:`resume` ends it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class LibmodbusRtu(PeerModbus):
    """libmodbus serving one controller on ``line.plc_end`` with the given line settings."""

    def __init__(
        self, controller: Controller, binary: Path, line: PtyPair, baud: int, parity: str, stopbits: int
    ) -> None:
        super().__init__(controller, [str(binary), line.plc_end, str(baud), parity, str(stopbits), "1"])

    async def counts(self) -> tuple[int, int, int]:
        """(requests served, answers garbled, answers cut short)."""
        _, served, garbled, dropped = (await self.command("count")).split()
        return int(served), int(garbled), int(dropped)


class ModbusSerialTcp(PeerModbus):
    """npm modbus-serial's TCP server serving one controller on a free port of 127.0.0.1."""

    def __init__(self, controller: Controller) -> None:
        # modbus-serial takes port 0 for "the default", 502: a free port is picked here instead.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        super().__init__(controller, ["node", str(TCP_SCRIPT), str(port)])

    async def connections(self) -> tuple[int, int]:
        """(TCP connections accepted since the start, open now)."""
        _, accepted, open_now = (await self.command("count")).split()
        return int(accepted), int(open_now)

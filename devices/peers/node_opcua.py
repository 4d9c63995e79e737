"""The node-opcua transition server (``peers/node/opcua_server.js``), driven.

:class:`NodeOpcUa` starts the server as a Node.js process serving one controller with one channel
(``Trip``, a ring of ``ring`` slots, the node layout of devices/opcua_nodes.py) and turns its
stdin/stdout protocol into awaitable calls: transitions (:meth:`burst`), a counter reset
(:meth:`reset`), a restart as a new boot on the same endpoint (:meth:`restart`) and the clients
it has seen (:meth:`clients`: sessions created and secure channels opened, so a test tells a
client that kept its connection from one that reconnected). With ``tls`` (the server's
certificate and key, PEM) its only endpoint is Basic256Sha256 SignAndEncrypt; clients'
certificates are accepted unseen unless ``reject_unknown_clients``.

Start-up costs about 2-6 s on a 2-core machine (node-opcua loads its standard address space).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from typing import Any

from devices.peers import NODE_DIR

SCRIPT = NODE_DIR / "opcua_server.js"
START_BACKSTOP_S = 60.0
ANSWER_BACKSTOP_S = 30.0


class NodeOpcUa:
    """One node-opcua server process; ``endpoint`` once started."""

    def __init__(
        self,
        name: str,
        pki: str,
        *,
        ring: int = 8,
        boot_id: int = 17,
        port: int = 0,
        tls: tuple[str, str] | None = None,
        reject_unknown_clients: bool = False,
    ) -> None:
        self.name, self.pki, self.ring, self.boot_id, self.port = name, pki, ring, boot_id, port
        self.tls, self.reject_unknown_clients = tls, reject_unknown_clients
        self.proc: asyncio.subprocess.Process | None = None
        self.endpoint = ""
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "node",
            str(SCRIPT),
            self.name,
            str(self.ring),
            self.pki,
            str(self.boot_id),
            str(self.port),
            *(self.tls or ()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "REJECT_UNKNOWN_CLIENTS": "1" if self.reject_unknown_clients else "0"},
        )
        ready = await self._answer(("READY ", "FAILED"), START_BACKSTOP_S)
        if not ready.startswith("READY "):
            raise RuntimeError(f"the node-opcua server did not start: {ready}")
        self.endpoint = str(json.loads(ready[6:])["endpoint"])
        self.port = int(self.endpoint.rsplit(":", 1)[1].split("/")[0])

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await proc.wait()

    async def restart(self, boot_id: int) -> None:
        """The process killed and started again on the same endpoint as boot ``boot_id`` (counters at 0)."""
        await self.stop()
        self.boot_id = boot_id
        await self.start()

    async def _answer(self, prefixes: tuple[str, ...], backstop: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None, "the server is not running"
        async with asyncio.timeout(backstop):
            while True:  # node-opcua may log to stdout too: only the protocol's lines count
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("the node-opcua server ended")
                if line.startswith(prefixes):
                    return line.strip()

    async def command(self, line: str) -> dict[str, Any]:
        """One stdin command; its ``DONE {...}`` answer (returns when the server did it)."""
        assert self.proc is not None and self.proc.stdin is not None, "the server is not running"
        async with self._lock:
            self.proc.stdin.write(f"{line}\n".encode())
            await self.proc.stdin.drain()
            answer = await self._answer(("DONE ",), ANSWER_BACKSTOP_S)
        return dict(json.loads(answer[5:]))

    async def burst(self, n: int, chunk: int = 1) -> list[int]:
        """``n`` transitions of Trip, ``chunk`` per write of the nodes; their transition ids."""
        done = await self.command(f"burst {n} 0 {chunk}")
        return list(range(int(done["first"]), int(done["last"]) + 1))

    async def reset(self, value: int) -> None:
        """Trip's transition counter set to ``value`` within the boot (no ring entry, no event)."""
        await self.command(f"reset {value}")

    async def clients(self) -> dict[str, int]:
        """``sessions`` created and ``channels`` opened since the start; ``*_open`` now."""
        return {k: int(v) for k, v in (await self.command("count")).items()}

"""The node-opcua Alarms & Conditions server (``peers/node/opcua_alarms_server.js``), driven.

:class:`NodeOpcUaAlarms` starts the server as a Node.js process and turns its stdin/stdout
protocol into awaitable calls: one transition (:meth:`alarm`), a transition whose event the
server never sends (:meth:`lose`), RefreshRequired, a refused ConditionRefresh, and a server
restart (the process killed and started again on the same port: StartTime changes, and
node-opcua loses every condition's state, as it does in the field). Every ConditionRefresh a
client calls is recorded in :attr:`refreshes` (answered) or :attr:`refused`.

Start-up costs about 2-6 s on a 2-core machine (node-opcua loads its standard address
space), so tests share one server per module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass
from typing import Any

from devices.peers import NODE_DIR

SCRIPT = NODE_DIR / "opcua_alarms_server.js"
START_BACKSTOP_S = 60.0


@dataclass(frozen=True)
class NodeAlarmEvent:
    """What the server said of one transition: its EventId and Time."""

    event_id: bytes
    time_ms: int


class NodeOpcUaAlarms:
    """One node-opcua server with the conditions of one controller."""

    def __init__(self, controller: str, conditions: list[str], port: int = 0) -> None:
        self.controller, self.conditions, self.port = controller, conditions, port
        self.proc: asyncio.subprocess.Process | None = None
        self.refreshes: list[int] = []  # subscription ids whose ConditionRefresh node-opcua answered
        self.refused: list[tuple[int, str]] = []  # (subscription id, status) of refused calls
        self.last: dict[str, NodeAlarmEvent] = {}  # condition -> its last transition
        self._answers: asyncio.Queue[str] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def endpoint(self) -> str:
        return f"opc.tcp://127.0.0.1:{self.port}/sim/"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "node",
            str(SCRIPT),
            str(self.port),
            self.controller,
            ",".join(self.conditions),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        async with asyncio.timeout(START_BACKSTOP_S):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("the node-opcua alarm server ended before it was ready")
                if line.startswith("FAILED"):
                    raise RuntimeError(f"the node-opcua alarm server failed: {line[7:].strip()}")
                if line.startswith("READY "):
                    self.port = int(json.loads(line[6:])["port"])
                    break
        self._answers = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(self.proc.stdout), name="node-opcua-alarms")

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    async def restart(self) -> None:
        """Killed and started again on the same port: a new StartTime, every condition lost."""
        await self.stop()
        self.last.clear()
        await self.start()

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while line := (await stdout.readline()).decode():
            if line.startswith("REFRESH "):
                call = json.loads(line[8:])
                if call["status"] == "Good":
                    self.refreshes.append(int(call["subscription"]))
                else:
                    self.refused.append((int(call["subscription"]), str(call["status"])))
            elif line.startswith(("EVENT ", "OK", "ERROR ")):  # node-opcua logs to stdout too
                self._answers.put_nowait(line.strip())

    async def _ask(self, command: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None, "the server is not running"
        async with self._lock:
            self.proc.stdin.write(command.encode() + b"\n")
            await self.proc.stdin.drain()
            async with asyncio.timeout(10):
                answer = await self._answers.get()
        if answer.startswith("ERROR"):
            raise RuntimeError(f"node-opcua alarm server: {command!r}: {answer[6:]}")
        return answer

    async def _transition(self, verb: str, condition: str, action: str) -> NodeAlarmEvent:
        answer: dict[str, Any] = json.loads((await self._ask(f"{verb} {condition} {action}"))[6:])
        ev = NodeAlarmEvent(bytes.fromhex(answer["event_id"]), int(answer["time_ms"]))
        self.last[condition] = ev
        return ev

    async def alarm(self, condition: str, action: str) -> NodeAlarmEvent:
        """One transition (``activate``, ``acknowledge``, ``clear``) and its condition event."""
        return await self._transition("alarm", condition, action)

    async def lose(self, condition: str, action: str) -> NodeAlarmEvent:
        """One transition whose event the server never sends (only a refresh shows it)."""
        return await self._transition("lose", condition, action)

    async def refresh_required(self) -> None:
        await self._ask("refresh_required")

    async def refuse_refresh(self, status: str | None) -> None:
        """ConditionRefresh answers ``status`` (e.g. ``BadNotImplemented``); None: node-opcua again."""
        await self._ask(f"refuse {status or 'Good'}")

    async def reset(self) -> None:
        """Every condition quiet (inactive, acknowledged, not retained), refresh answered again."""
        await self._ask("reset")
        self.last.clear()

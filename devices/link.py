"""A network link that can be cut: a TCP forwarder between a client and a server on 127.0.0.1.

Holds :class:`CutLink`. Cutting it closes every forwarded connection and refuses new ones
while the server behind it keeps running, which is what a pulled cable or a switch reboot
does to the gateway's side; the server's own state (ServerStatus/StartTime, alarm
conditions) is untouched, unlike a server restart.
"""

from __future__ import annotations

import asyncio
import contextlib


class CutLink:
    """``127.0.0.1:<port>`` forwards to ``target``; :meth:`cut` and :meth:`restore` switch it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.is_cut = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        await self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def cut(self) -> None:
        """Close every forwarded connection; new ones are closed as soon as they arrive."""
        self.is_cut = True
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await t

    def restore(self) -> None:
        self.is_cut = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)

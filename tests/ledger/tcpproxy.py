"""A TCP proxy the test controls, in front of PostgreSQL: `cut_after_commit()` arms it so that
the next `COMMIT` a client sends (a simple-query message, as psycopg sends it) reaches the server
and then both sides are cut before any answer comes back: the client cannot learn the outcome,
while the server commits. The one fault here that cannot be made with real parts alone (the
window between COMMIT sent and its answer is well under a millisecond on loopback)."""

from __future__ import annotations

import asyncio
import contextlib

COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # 'Q', length 4 + 7, "COMMIT\0"
COMMITTED = b"C\x00\x00\x00\x0bCOMMIT\x00"  # the server's CommandComplete of that COMMIT


class Proxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._armed = False
        self.cuts = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def cut_after_commit(self) -> None:
        self._armed = True

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(*self.target)
        except OSError:
            cw.close()
            return
        cut, answered = asyncio.Event(), asyncio.Event()

        async def up() -> None:  # client -> server
            while not cut.is_set():
                data = await cr.read(65536)
                if not data:
                    break
                if self._armed and COMMIT in data:
                    self._armed = False
                    self.cuts += 1
                    cut.set()  # nothing the server answers from now on reaches the client
                    sw.write(data)
                    await sw.drain()
                    cw.transport.abort()
                    # The server's own answer, never forwarded: only then is the COMMIT whole (with a
                    # synchronous standby, on the standby too). A fixed 0.3 s was too short on a loaded
                    # machine: the cut came while the server waited for the standby.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(answered.wait(), 30)
                    sw.transport.abort()
                    return
                sw.write(data)
                await sw.drain()
            sw.close()

        async def down() -> None:  # server -> client
            while True:
                data = await sr.read(65536)
                if not data:
                    break
                if cut.is_set():
                    if COMMITTED in data:
                        answered.set()
                    continue
                cw.write(data)
                await cw.drain()
            if not cut.is_set():
                cw.close()

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        for t in tasks:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

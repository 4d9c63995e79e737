"""A recording CloudEvents HTTP receiver: the embedded upstream for the demo, tests and benchmarks.

It accepts `POST` of `application/cloudevents-batch+json` (a JSON array) or
`application/cloudevents+json` (one event) on any path, records every
request, and counts events, distinct (source, id) pairs and redeliveries, as
a deduplicating receiver would. It can be told to misbehave:

* `fail(status, count, retry_after)`: answer the next `count` requests (or all,
  until `heal()`) with `status`, without taking their events;
* `poison(source, id)`: answer 400 to any request holding that event (a
  poison event);
* `stall(seconds)`: record and take each request, then hold the answer
  (`seconds=None`: until `release()`). The sender has published but has no
  acknowledgement, which is exactly the window a crash test needs;
* `go_away(seconds)`: close the listening socket and every connection, and
  come back on the same port later.

In-process: `async with Receiver() as rx: rx.url ...`. As a process:
`python -m devices.upstream [--port 0]` prints `READY {"url": ..., "pid": ...}`
and takes the same commands on `/_control/<name>?...` plus `GET /_stats`.

It never imports `agent`: it is an independent peer, like the PLC simulators.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Request:
    """One received request, as evidence."""

    received_at: float
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0


@dataclass
class Behaviour:
    fail_status: int | None = None
    fail_left: int | None = None
    retry_after: str | None = None
    poisoned: set[tuple[str, str]] = field(default_factory=set)
    stall_s: float | None = 0.0  # None = until release()


class Receiver:
    """The recording receiver. Not thread-safe; one event loop."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None, keep: bool = True
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.keep = keep
        self.requests: list[Request] = []
        self.events: list[dict[str, Any]] = []
        self.distinct: set[tuple[str, str]] = set()
        self.request_count = 0
        self.event_count = 0
        self.redeliveries = 0
        self.behaviour = Behaviour()
        self._released = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._away: asyncio.Task[None] | None = None
        self._pending_away: asyncio.Task[None] | None = None
        self.on_event: asyncio.Event = asyncio.Event()  # set whenever events are taken

    # --- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/_stats", self._stats)
        app.router.add_post("/_control/{command}", self._control)
        app.router.add_post("/{tail:.*}", self._take)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        self._runner = runner

    async def stop(self) -> None:
        if self._away is not None:
            self._away.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._away
        self._released.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/events"

    # --- behaviour -------------------------------------------------------------

    def fail(self, status: int, count: int | None = None, retry_after: str | None = None) -> None:
        self.behaviour.fail_status, self.behaviour.fail_left = status, count
        self.behaviour.retry_after = retry_after

    def heal(self) -> None:
        self.behaviour.fail_status = self.behaviour.fail_left = None
        self.behaviour.poisoned.clear()

    def poison(self, source: str, event_id: str) -> None:
        self.behaviour.poisoned.add((source, event_id))

    def cure(self, source: str, event_id: str) -> None:
        self.behaviour.poisoned.discard((source, event_id))

    def stall(self, seconds: float | None) -> None:
        self.behaviour.stall_s = seconds
        self._released.clear()

    def release(self) -> None:
        self.behaviour.stall_s = 0.0
        self._released.set()

    async def go_away(self, seconds: float) -> None:
        """Close the port now and reopen it on the same port after `seconds` (in the background)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

        async def come_back() -> None:
            await asyncio.sleep(seconds)
            await self.start()

        self._away = asyncio.create_task(come_back(), name="receiver-come-back")

    async def back(self) -> None:
        """Wait until a `go_away` is over."""
        if self._away is not None:
            await self._away
            self._away = None

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.request_count,
            "events": self.event_count,
            "distinct": len(self.distinct),
            "redeliveries": self.redeliveries,
        }

    # --- handlers --------------------------------------------------------------

    async def _take(self, request: web.Request) -> web.Response:
        body = await request.read()
        rec = Request(time.time(), request.path, dict(request.headers), body if self.keep else b"")
        self.request_count += 1
        if self.keep:
            self.requests.append(rec)
        rec.status, answer = self._decide(request, body)
        if rec.status // 100 == 2 and self.behaviour.stall_s != 0.0:
            if self.behaviour.stall_s is None:
                await self._released.wait()
            else:
                await asyncio.sleep(self.behaviour.stall_s)
        return answer

    def _decide(self, request: web.Request, body: bytes) -> tuple[int, web.Response]:
        b = self.behaviour
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, web.Response(status=401, text="bad or missing bearer token")
        if b.fail_status is not None:
            status = b.fail_status
            if b.fail_left is not None:
                b.fail_left -= 1
                if b.fail_left <= 0:
                    b.fail_status = b.fail_left = None
            return status, self._failure(status)
        try:
            doc = json.loads(body)
        except ValueError:
            return 400, web.Response(status=400, text="body is not JSON")
        events = doc if isinstance(doc, list) else [doc]
        if not all(isinstance(e, dict) and "source" in e and "id" in e for e in events):
            return 400, web.Response(status=400, text="every event needs source and id")
        for e in events:
            if (e["source"], e["id"]) in b.poisoned:
                return 400, web.Response(status=400, text=f"poison event {e['source']} {e['id']}")
        for e in events:
            pair = (e["source"], e["id"])
            if pair in self.distinct:
                self.redeliveries += 1
            self.distinct.add(pair)
            if self.keep:
                self.events.append(e)
        self.event_count += len(events)
        self.on_event.set()
        return 200, web.json_response({"accepted": len(events)})

    def _failure(self, status: int) -> web.Response:
        headers = {"Retry-After": self.behaviour.retry_after} if self.behaviour.retry_after else None
        return web.Response(status=status, text="told to fail", headers=headers)

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _control(self, request: web.Request) -> web.Response:
        q = request.query
        cmd = request.match_info["command"]
        if cmd == "fail":
            self.fail(int(q["status"]), int(q["count"]) if "count" in q else None, q.get("retry_after"))
        elif cmd == "heal":
            self.heal()
        elif cmd == "poison":
            self.poison(q["source"], q["id"])
        elif cmd == "stall":
            self.stall(float(q["seconds"]) if "seconds" in q else None)
        elif cmd == "release":
            self.release()
        elif cmd == "away":
            asyncio.get_running_loop().call_soon(
                lambda: asyncio.ensure_future(self.go_away(float(q["seconds"])))
            )
        else:
            return web.Response(status=404, text=f"unknown command {cmd}")
        return web.json_response({"ok": cmd})


async def _serve(host: str, port: int, token: str | None, keep: bool) -> None:
    rx = Receiver(host, port, token=token, keep=keep)
    await rx.start()
    print("READY " + json.dumps({"url": rx.url, "port": rx.port, "pid": os.getpid()}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await rx.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m devices.upstream", description="Recording CloudEvents receiver."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = a free port (printed on the READY line)")
    p.add_argument("--token", help="require this bearer token")
    p.add_argument("--no-keep", action="store_true", help="count only; do not keep bodies (benchmarks)")
    a = p.parse_args(argv)
    asyncio.run(_serve(a.host, a.port, a.token, not a.no_keep))


if __name__ == "__main__":
    main()

"""The least an HTTP receiver can do: read each request's body whole and answer 200.

It parses nothing, counts bytes and requests only, so in the replay bench the sender (the
agent, or the bare baseline) is what is measured, not this receiver. A process of its own:

    python bench/sink_receiver.py      # prints READY {"url": ..., "pid": ...}, serves until killed
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

from aiohttp import web


async def main() -> None:
    counts = {"requests": 0, "bytes": 0}

    async def take(request: web.Request) -> web.Response:
        body = await request.read()
        counts["requests"] += 1
        counts["bytes"] += len(body)
        return web.Response(status=200)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(counts)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/_stats", stats)
    app.router.add_route("POST", "/{tail:.*}", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print("READY " + json.dumps({"url": f"http://127.0.0.1:{port}/events", "pid": os.getpid()}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())

"""The review page's application: routes, headers, the pool; and `serve` for the command line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

from agent.ledger.web import events, overview, records, review_pages, writes
from agent.ledger.web.common import GUARD, POOL, SILENT_AFTER
from agent.ledger.web.outage import OUTAGE_SINCE, outage_middleware
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard, headers_middleware

DEFAULT_LISTEN = ("127.0.0.1", 8089)
DEFAULT_SILENT_AFTER_S = 300.0

_CSS = resources.files("agent.ledger.web").joinpath("static", "style.css").read_text(encoding="utf-8")


async def style(_request: web.Request) -> web.StreamResponse:
    return web.Response(text=_CSS, content_type="text/css", headers={"Cache-Control": "max-age=300"})


def make_app(pool: Pool, guard: Guard, *, silent_after: float = DEFAULT_SILENT_AFTER_S) -> web.Application:
    app = web.Application(middlewares=[headers_middleware, outage_middleware], client_max_size=64 * 1024)
    app[OUTAGE_SINCE] = []
    app[POOL] = pool
    app[GUARD] = guard
    app[SILENT_AFTER] = silent_after
    get: list[tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] = [
        ("/", overview.overview),
        ("/events", events.events),
        ("/events/{id}", events.event),
        ("/conflicts", review_pages.conflicts),
        ("/pending", review_pages.pending),
        ("/timeline", records.timeline),
        ("/notifications", records.notifications),
        ("/login", writes.login_form),
        ("/static/style.css", style),
    ]
    for path, handler in get:
        app.router.add_get(path, handler, allow_head=True)
    app.router.add_post("/login", writes.login)
    app.router.add_post("/arrivals/{id}/mark", writes.mark)
    app.router.add_post("/notifications/{id}/retry", writes.retry)

    async def close_pool(_app: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)
    return app


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    stop: asyncio.Event,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until `stop` is set; `ready` gets the bound port (0 asks for a free one)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = int(runner.addresses[0][1]) if runner.addresses else port
        if ready is not None:
            ready(bound)
        await stop.wait()
    finally:
        await runner.cleanup()

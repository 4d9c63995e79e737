"""The review page while PostgreSQL is unreachable: a short 503 page, not a traceback per request.

A page handler that meets an unavailable database (`agent.ledger.failover.unavailable`, or the
connection's `LedgerUnavailable`) answers `503 Service Unavailable` with `Retry-After` and a page
saying since when the database is unreachable and that nothing is acknowledged meanwhile: the
intakes withhold their acknowledgements (MQTT PUBACK, HTTP 2xx) until their transaction commits,
so the gateways keep their events (and the broker what its queue limit allows). The outage is
logged once when it starts and once when it ends.
`/metrics` is not served here and answers as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import psycopg
from aiohttp import web

from agent.ledger import failover
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.web.render import render_text

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5

OUTAGE_SINCE = web.AppKey("outage_since", list)  # [] while the database answers, [since, reason] not


def _page(since: float, reason: str) -> str:
    return render_text(
        "outage.html",
        since=datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        ago=max(0, int(time.time() - since)),
        retry_after=RETRY_AFTER_S,
        reason=reason,
    )


@web.middleware
async def outage_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    state = request.app[OUTAGE_SINCE]
    try:
        resp = await handler(request)
    except (LedgerUnavailable, psycopg.Error) as exc:
        if isinstance(exc, psycopg.Error) and not failover.unavailable(exc):
            raise
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if not state:
            state[:] = [time.time(), reason]
            log.error("review page: the database is unreachable, pages answer 503: %s", reason)
        else:
            state[1] = reason
        return web.Response(
            status=503,
            text=_page(state[0], state[1]),
            content_type="text/html",
            headers={"Retry-After": str(RETRY_AFTER_S), "Cache-Control": "no-store"},
        )
    if state:
        log.warning("review page: the database answers again after %.0f s", time.time() - state[0])
        state.clear()
    return resp

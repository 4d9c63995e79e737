"""HTTP intake: `POST` of CloudEvents (the gateway's HTTP sink format), 2xx only after commit.

| answer | when | stored |
|---|---|---|
| 200 + one result per event | the batch committed (per-event problems are `rejected` arrivals) | all |
| 400 | the body is not JSON / not an event or an array of events | nothing |
| 401 | a token file is configured and the request lacks `Authorization: Bearer <token>` | nothing |
| 413 | the body is over `max_body` | nothing |
| 415 | the content type is not CloudEvents JSON | nothing |
| 503 + Retry-After | PostgreSQL is unreachable | nothing |
"""

from __future__ import annotations

import hmac
import json
import logging
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web

from agent.core.timestamps import format_timestamp
from agent.ledger.cloudevents import BodyError, parse_body
from agent.ledger.config import HttpIntake
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.status_intake import HTTP_TYPE as STATUS_TYPE
from agent.ledger.status_intake import StatusStore
from agent.ledger.status_intake import handle_http as handle_status
from agent.ledger.writer import Writer

log = logging.getLogger(__name__)

BATCH_TYPE = "application/cloudevents-batch+json"
SINGLE_TYPES = ("application/cloudevents+json", "application/json")


def _problem(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


class HttpServer:
    """The aiohttp application over a Writer; `start()` listens, `stop()` drains in-flight requests."""

    def __init__(self, settings: HttpIntake, writer: Writer) -> None:
        self.settings = settings
        self.writer = writer
        self._token = (
            Path(settings.token_file).read_text(encoding="utf-8").rstrip("\r\n")
            if settings.token_file
            else None
        )
        self.app = web.Application(client_max_size=settings.max_body)
        self.app.router.add_post("/{tail:.*}", self.handle)
        self._runner: web.AppRunner | None = None
        self.port = settings.port
        self.status_store: StatusStore | None = None  # gateways' status records (status_intake)

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=10.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info("http intake listening host=%s port=%d", self.settings.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _authorised(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self._token}".encode())

    async def handle(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _problem(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        ctype = request.content_type
        if ctype == STATUS_TYPE and self.status_store is not None:  # not an event: its own table
            return await handle_status(request, self.status_store)
        if ctype != BATCH_TYPE and ctype not in SINGLE_TYPES:
            return _problem(
                415, f"content type {ctype!r} is not {BATCH_TYPE} or application/cloudevents+json"
            )
        if request.content_length is not None and request.content_length > self.settings.max_body:
            return _problem(413, f"the body is over the limit of {self.settings.max_body} bytes")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _problem(413, f"the body is over the limit of {self.settings.max_body} bytes")
        now = format_timestamp(datetime.now(UTC))
        try:
            arrivals = parse_body(body, batch=ctype == BATCH_TYPE, via="http", now=now)
        except BodyError as exc:
            return _problem(400, str(exc))
        try:
            outcomes = await self.writer.record(arrivals)
        except LedgerUnavailable as exc:
            retry = max(1, round(self.writer.retry_after_s))
            return _problem(503, str(exc), {"Retry-After": str(retry)})
        results = [
            {
                "index": i,
                "decision": oc.decision.value,
                "canonical_id": oc.canonical_id,
                "duplicate_of": oc.duplicate_of,
                "reason": oc.reason,
            }
            for i, oc in enumerate(outcomes)
        ]
        return web.Response(
            text=json.dumps({"results": results}), status=200, content_type="application/json"
        )

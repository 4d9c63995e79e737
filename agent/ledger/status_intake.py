"""The gateways' status records reach the ledger (operator.md section 3), apart from the events.

MQTT: a plain subscription to `status_topic` (default `+/status/+`, the gateways publish each
record retained at QoS 1 on `<site>/status/<gateway>`, the record naming its site and gateway):
every ledger instance keeps the latest of each (site, gateway); a record lost while the ledger was
away is replaced by the next one (or the retained one on connect), so a clean session is right
here. A record that arrives while PostgreSQL is away is held (the latest two of each (site,
gateway), in order: a record and its Will) and kept once it answers again (`StatusStore.hold`,
`retry_held`), not dropped: a gateway that died meanwhile sends no next one. HTTP: a POST with
the content type `application/vnd.edgeagent.status+json` to the HTTP intake (`handle_http`). Records go to
`gateway_status` only, on a connection of their own: never into the event tables, never through
the Writer that acknowledges events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiomqtt

if TYPE_CHECKING:
    from aiohttp import web

from agent.ledger import gateway_status
from agent.ledger.config import MqttIntake
from agent.ledger.connection import connect

log = logging.getLogger(__name__)

HTTP_TYPE = "application/vnd.edgeagent.status+json"
RECONNECT_S = (0.5, 1.0, 2.0, 5.0, 10.0)


class StatusStore:
    """One connection for status records, reconnecting on the next record after a failure."""

    def __init__(self, dsn: str | None, password: str | None = None) -> None:
        self._dsn = dsn
        self._password = password
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self.recorded = 0
        # (site, gateway) -> records not kept yet
        self._held: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = {}

    def hold(self, status: dict[str, Any], via: str) -> None:
        """Keep `status` for `retry_held` (PostgreSQL was away): the latest two of its (site, gateway)."""
        held = self._held.setdefault((str(status["site"]), str(status["gateway"])), [])
        held.append((status, via))
        del held[:-2]

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._held.values())

    async def retry_held(self) -> int:
        """Keep what was held, in order per (site, gateway); what fails again stays held (before what was
        held meanwhile). Returns how many were kept; raises while PostgreSQL is still away."""
        kept = 0
        for key in list(self._held):
            queue = self._held.pop(key)
            for i, (status, via) in enumerate(queue):
                try:
                    await self.record(status, via)
                except Exception:
                    self._held[key] = (queue[i:] + self._held.get(key, []))[-2:]
                    raise
                kept += 1
        return kept

    async def record(self, status: dict[str, Any], via: str) -> None:
        async with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = await connect(self._dsn, password=self._password)
            try:
                await gateway_status.record(self._conn, status, via)
            except Exception:
                with contextlib.suppress(Exception):
                    await self._conn.close()
                self._conn = None
                raise
            self.recorded += 1

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


async def handle_http(request: web.Request, store: StatusStore) -> web.Response:
    """A status POST: 204 when kept, 400 when it is not a status record, 503 when PostgreSQL is away."""
    from aiohttp import web  # only the HTTP intake serves this: an MQTT-only ledger never loads it

    body = await request.read()
    try:
        status = gateway_status.parse(body)
    except gateway_status.BadStatus as exc:
        return web.json_response({"title": str(exc), "status": 400}, status=400)
    try:
        await store.record(status, "http")
    except Exception as exc:
        return web.json_response({"title": f"status not kept: {exc}", "status": 503}, status=503)
    return web.Response(status=204)


async def run_mqtt(settings: MqttIntake, topic: str, store: StatusStore, stop: asyncio.Event) -> None:
    """Subscribe to the status topic until `stop`, with backoff on a lost broker."""
    failures = 0
    password = (
        Path(settings.password_file).read_text(encoding="utf-8").rstrip("\r\n")
        if settings.password_file
        else None
    )
    while not stop.is_set():
        client = aiomqtt.Client(
            settings.host,
            settings.port,
            identifier=f"{settings.client_id}-status",
            username=settings.username,
            password=password,
            timeout=10,
        )
        try:
            async with client:
                await client.subscribe(topic, qos=1)
                log.info("status intake subscribed %s", topic)
                failures = 0
                receive = asyncio.ensure_future(_receive(client, store))
                halt = asyncio.ensure_future(stop.wait())
                retry = asyncio.ensure_future(_retry_held(store))
                try:
                    await asyncio.wait([receive, halt], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for t in (receive, halt, retry):
                        t.cancel()
                    await asyncio.gather(receive, halt, retry, return_exceptions=True)
                if receive.done() and not receive.cancelled() and receive.exception() is not None:
                    raise receive.exception()  # type: ignore[misc]
        except (aiomqtt.MqttError, OSError) as exc:
            delay = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
            failures += 1
            log.warning("status intake: %s; again in %.1f s", exc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)


async def _receive(client: aiomqtt.Client, store: StatusStore) -> None:
    async for message in client.messages:
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        try:
            status = gateway_status.parse(payload)
        except gateway_status.BadStatus as exc:
            log.warning("status record on %s ignored: %s", message.topic, exc)
            continue
        if store.held:
            store.hold(status, "mqtt")  # behind the ones held before it: kept in order
            continue
        try:
            await store.record(status, "mqtt")
        except Exception as exc:  # PostgreSQL away: held, kept when it answers again
            store.hold(status, "mqtt")
            log.warning(
                "status record of %s/%s held, not kept yet: %s", status["site"], status["gateway"], exc
            )


async def _retry_held(store: StatusStore, every_s: float = 2.0) -> None:
    """Keep the held records once PostgreSQL answers again."""
    while True:
        await asyncio.sleep(every_s)
        if store.held:
            try:
                kept = await store.retry_held()
            except Exception as exc:
                log.debug("held status records not kept yet: %s", exc)
            else:
                log.info("status records held while PostgreSQL was away kept: %d", kept)

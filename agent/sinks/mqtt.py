"""MQTT sink (aiomqtt 2.5 / paho 2.2): QoS 1, an event is delivered only on its PUBACK.
Never raises a network error (they come back as `retry`) and never touches the store.

Facts about aiomqtt and paho this module is built around:
* `publish(qos=1)` returns after the PUBACK, or raises `MqttError("Operation
  timed out")` after `timeout`. A timed-out message may still arrive: that is
  the "at least once" case, and receivers deduplicate on (source, id).
* There is no auto-reconnect. `publish()` connects when it has no connection;
  the forwarder's backoff paces the attempts. A client that only publishes
  notices a lost connection on its next publish, so publishes of one batch
  race against the client's disconnect future and fail fast with it instead
  of each waiting for its own timeout.
* aiomqtt ignores MQTT v5 PUBACK reason codes: we wrap paho's `on_publish`
  to record them, and a code >= 0x80 makes the event `rejected`. On 3.1.1 (the
  default) a refusing broker disconnects instead, or acks and drops (mosquitto
  ACLs): get ACLs right and watch them on the broker.
* With 20-100 messages in flight, Nagle and delayed ACKs collapse throughput;
  TCP_NODELAY is set on the client socket (set it on the broker as well).
* One unique client id per process: two connections with one id knock each
  other off in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import aiomqtt

from agent.config.upstreams import MqttUpstream
from agent.core.redact import mask_url
from agent.core.send_outcome import DELIVERED, SendOutcome, classify_mqtt_reason, retry
from agent.sinks.encode import Event, batch_body, render_topic
from agent.sinks.tls import read_secret, tls_context

log = logging.getLogger(__name__)

# The paho message id of the publish running in the current task (see `_track`).
_MID: contextvars.ContextVar[list[int]] = contextvars.ContextVar("edge_agent_mqtt_mid")


def _quiet_logger() -> logging.Logger:
    # aiomqtt warns on every publish while more than 10 are pending; with a window of 100 that is
    # every message. Its own errors still show at ERROR.
    lg = logging.getLogger("agent.sinks.mqtt.aiomqtt")
    lg.setLevel(logging.ERROR)
    return lg


class MqttSink:
    """A `Sink` publishing CloudEvents to one MQTT broker at QoS 1."""

    def __init__(self, settings: MqttUpstream, *, site: str, gateway: str) -> None:
        self.name = settings.name
        self.settings = settings
        self.site = site
        self.client_id = settings.client_id or f"edge-agent-{gateway}-{settings.name}-{os.getpid()}"
        self._client: aiomqtt.Client | None = None
        self._refused: dict[int, tuple[int, str]] = {}

    async def publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        if self._client is None:
            try:
                self._client = await self._connect()
            except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                return [retry(f"{self._where()}: connect failed: {exc}")] * len(events)
        messages = self._messages(events)
        outcomes = await self._publish_all(self._client, messages)
        if any(o is not DELIVERED and o.reason.startswith("connection") for o in outcomes):
            await self._drop()
        return [oc for (topic, group, body), oc in zip(messages, outcomes, strict=True) for _ in group]

    async def close(self) -> None:
        await self._drop()

    # --- internals -------------------------------------------------------------

    def _where(self) -> str:
        return f'MQTT upstream "{self.name}" ({mask_url(self.settings.url)})'

    def _messages(self, events: Sequence[Event]) -> list[tuple[str, list[Event], bytes]]:
        """One message per event, or consecutive events with one topic grouped up to batch_size."""
        s = self.settings
        out: list[tuple[str, list[Event], bytes]] = []
        if s.batch_size == 1:
            return [(render_topic(s.topic, self.site, e), [e], e.body) for e in events]
        group: list[Event] = []
        topic = ""
        for e in events:
            t = render_topic(s.topic, self.site, e)
            if group and (t != topic or len(group) >= s.batch_size):
                out.append((topic, group, batch_body(group)))
                group = []
            topic = t
            group.append(e)
        if group:
            out.append((topic, group, batch_body(group)))
        return out

    async def _publish_all(
        self, client: aiomqtt.Client, messages: list[tuple[str, list[Event], bytes]]
    ) -> list[SendOutcome]:
        window = asyncio.Semaphore(self.settings.max_inflight)
        lost: asyncio.Future[None] = client._disconnected  # no public API for "the connection is gone"

        async def one(topic: str, body: bytes) -> SendOutcome:
            async with window:
                if lost.done():
                    return retry("connection lost before this message was sent")
                return await self._publish_one(client, topic, body)

        tasks = [asyncio.create_task(one(t, b)) for t, _, b in messages]
        everything: asyncio.Future[Any] = asyncio.gather(*tasks, return_exceptions=True)
        watcher: asyncio.Future[Any] = asyncio.ensure_future(asyncio.shield(lost))
        try:
            # One wait over two futures (not over every task) keeps this O(n) per batch.
            await asyncio.wait({everything, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await watcher
            for t in tasks:
                t.cancel()  # no-op for finished ones; the rest lost their connection
            await everything
        return [self._result(t) for t in tasks]

    @staticmethod
    def _result(task: asyncio.Task[SendOutcome]) -> SendOutcome:
        if task.cancelled():
            return retry("connection lost while waiting for PUBACK")
        exc = task.exception()
        if exc is not None:
            return retry(f"connection error: {exc}")
        return task.result()

    async def _publish_one(self, client: aiomqtt.Client, topic: str, body: bytes) -> SendOutcome:
        cell: list[int] = []
        _MID.set(cell)
        try:
            await client.publish(topic, body, qos=1, timeout=self.settings.ack_timeout_s)
        except aiomqtt.MqttError as exc:
            return retry(f"connection error: {exc}")
        refused = self._refused.pop(cell[0], None) if cell else None
        if refused is not None:
            return classify_mqtt_reason(*refused)
        return DELIVERED

    async def _connect(self) -> aiomqtt.Client:
        s = self.settings
        url = urlsplit(s.url)
        secure = url.scheme == "mqtts"
        password = read_secret(s.password_file) if s.password_file else None
        client = aiomqtt.Client(
            url.hostname or "localhost",
            url.port or (8883 if secure else 1883),
            username=s.username,
            password=password,
            identifier=self.client_id,
            protocol=aiomqtt.ProtocolVersion.V5 if s.protocol == "5" else aiomqtt.ProtocolVersion.V311,
            keepalive=s.keepalive_s,
            timeout=s.connect_timeout_s,
            max_inflight_messages=s.max_inflight,
            tls_context=tls_context(s.ca_file, s.cert_file, s.key_file) if secure else None,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            logger=_quiet_logger(),
        )
        client.pending_calls_threshold = s.max_inflight + 10
        self._track(client)
        await asyncio.wait_for(client.__aenter__(), s.connect_timeout_s + 1.0)
        log.info("mqtt connected upstream=%s url=%s client_id=%s", self.name, mask_url(s.url), self.client_id)
        return client

    def _track(self, client: aiomqtt.Client) -> None:
        """Record MQTT v5 PUBACK reason codes by message id (aiomqtt drops them)."""
        paho: Any = client._client
        on_publish, publish = paho.on_publish, paho.publish
        refused = self._refused

        def tracked_on_publish(c: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
            if getattr(rc, "is_failure", False):
                refused[mid] = (int(rc.value), str(rc))
            on_publish(c, userdata, mid, rc, props)

        def tracked_publish(*args: Any, **kwargs: Any) -> Any:
            info = publish(*args, **kwargs)
            cell = _MID.get(None)
            if cell is not None:
                cell.append(info.mid)
            return info

        paho.on_publish = tracked_on_publish
        paho.publish = tracked_publish

    async def _drop(self) -> None:
        client, self._client = self._client, None
        self._refused.clear()
        if client is None:
            return
        with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
            await asyncio.wait_for(client.__aexit__(None, None, None), 2.0)

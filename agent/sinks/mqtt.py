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
* The window: per connection, `max_inflight` long-lived workers take messages
  from one FIFO queue (no task per message). `publish()` may be called again
  before an earlier call returned (`overlapping`): its messages queue behind
  the earlier ones, so the window stays full across the forwarder's reads and
  messages still go out in call order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt

from agent.config.upstreams import MqttUpstream
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


@dataclass(eq=False)
class _Batch:
    """The outcomes of one `publish()` call, filled in by the workers."""

    outcomes: list[SendOutcome | None]
    left: int
    done: asyncio.Future[None]

    def settle(self, i: int, oc: SendOutcome) -> None:
        if self.outcomes[i] is None:
            self.outcomes[i] = oc
            self.left -= 1
            if self.left == 0 and not self.done.done():
                self.done.set_result(None)


_Item = tuple[_Batch, int, str, bytes]


class _Window:
    """One connection's window: a FIFO of messages and `max_inflight` workers publishing them."""

    def __init__(self, client: aiomqtt.Client, size: int, publish_one: Any) -> None:
        self.client = client
        self.queue: collections.deque[_Item] = collections.deque()
        self.ready = asyncio.Event()
        self.lost: asyncio.Future[None] = client._disconnected  # no public API for "the connection is gone"
        self._publish_one = publish_one
        self.workers = [asyncio.create_task(self._work(), name="mqtt-window") for _ in range(size)]
        self.lost.add_done_callback(self._on_lost)

    def offer(self, batch: _Batch, messages: list[tuple[str, list[Event], bytes]]) -> None:
        if self.lost.done():
            for i in range(len(messages)):
                batch.settle(i, retry("connection lost before this message was sent"))
            return
        self.queue.extend((batch, i, topic, body) for i, (topic, _, body) in enumerate(messages))
        self.ready.set()

    def forget(self, batch: _Batch) -> None:
        """Take the messages of `batch` that no worker has taken yet off the queue."""
        kept = [item for item in self.queue if item[0] is not batch]
        self.queue.clear()
        self.queue.extend(kept)

    async def _work(self) -> None:
        queue = self.queue
        while True:
            if not queue:
                self.ready.clear()
                await self.ready.wait()
                continue
            batch, i, topic, body = queue.popleft()
            try:
                oc = await self._publish_one(self.client, topic, body)
            except asyncio.CancelledError:
                batch.settle(i, retry("connection lost while waiting for PUBACK"))
                raise
            except Exception as exc:  # anything the client raises is a reason to resend, never a crash
                oc = retry(f"connection error: {exc}")
            batch.settle(i, oc)

    def _on_lost(self, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled():
            fut.exception()  # retrieved: the loss is reported per message below
        self.close()

    def close(self) -> None:
        """Stop the workers; every message not acknowledged comes back as `retry`."""
        for w in self.workers:
            w.cancel()  # an in-flight message becomes retry in its worker
        while self.queue:
            batch, i, _, _ = self.queue.popleft()
            batch.settle(i, retry("connection lost before this message was sent"))


class MqttSink:
    """A `Sink` publishing CloudEvents to one MQTT broker at QoS 1."""

    overlapping = True  # publish() may be called again before an earlier call returned

    def __init__(self, settings: MqttUpstream, *, site: str, gateway: str) -> None:
        self.name = settings.name
        self.settings = settings
        self.site = site
        self.client_id = settings.client_id or f"edge-agent-{gateway}-{settings.name}-{os.getpid()}"
        self._client: aiomqtt.Client | None = None
        self._window: _Window | None = None
        self._connecting = asyncio.Lock()
        self._refused: dict[int, tuple[int, str]] = {}

    async def publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        async with self._connecting:
            if self._window is None:
                try:
                    client = await self._connect()
                except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                    return [retry(f"{self._where()}: connect failed: {exc}")] * len(events)
                self._client = client
                self._window = _Window(client, self.settings.max_inflight, self._publish_one)
            window = self._window
        messages = self._messages(events)
        outcomes = await self._publish_all(window, messages)
        if self._window is window and any(
            o is not DELIVERED and o.reason.startswith("connection") for o in outcomes
        ):
            await self._drop()
        return [oc for (topic, group, body), oc in zip(messages, outcomes, strict=True) for _ in group]

    async def close(self) -> None:
        await self._drop()

    # --- internals -------------------------------------------------------------

    def _where(self) -> str:
        return f'MQTT upstream "{self.name}" ({self.settings.url})'

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
        self, window: _Window, messages: list[tuple[str, list[Event], bytes]]
    ) -> list[SendOutcome]:
        """Queue `messages` on the window and wait for every outcome (cancelled: all retry)."""
        if not messages:
            return []
        loop = asyncio.get_running_loop()
        batch = _Batch([None] * len(messages), len(messages), loop.create_future())
        window.offer(batch, messages)
        try:
            await asyncio.shield(batch.done)
        except asyncio.CancelledError:
            # The caller gave up (the drain is over): these messages stay pending. Messages not yet
            # handed to the client are taken off the queue; the connection is dropped by close().
            window.forget(batch)
            for i in range(len(messages)):
                batch.settle(i, retry("stopped before the upstream acknowledged"))
            raise
        return [oc if oc is not None else retry("not sent") for oc in batch.outcomes]

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
        log.info("mqtt connected upstream=%s url=%s client_id=%s", self.name, s.url, self.client_id)
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
        window, self._window = self._window, None
        if window is not None:
            window.close()
        self._refused.clear()
        if client is None:
            return
        with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
            await asyncio.wait_for(client.__aexit__(None, None, None), 2.0)

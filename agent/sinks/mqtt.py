"""MQTT sink (aiomqtt 2.5 / paho 2.2): QoS 1, an event is delivered only on its PUBACK.
Never raises a network error (they come back as `retry`) and never touches the store.

Built around these facts of aiomqtt and paho (the reasons in full: docs/architecture.md, "The
MQTT sink and aiomqtt/paho"):

* Messages go to paho's own `publish()`, which keeps `max_inflight_messages` on the wire and
  queues the rest in call order: no task, event or timer per message; calls may overlap.
* Delivered on paho's `on_publish`. One timer per connection: the oldest message not
  acknowledged after `ack_timeout_s` is `retry` and the connection is dropped; a disconnect
  makes every unacknowledged message `retry` at once.
* No auto-reconnect: `publish()` connects, the forwarder's backoff paces the attempts.
* An MQTT v5 PUBACK reason code >= 0x80 makes the event `rejected` (paho gives the codes,
  aiomqtt ignores them).
* TCP_NODELAY on the client socket; one unique client id per process.
* Receipts (`listen_for_receipts`): each connection subscribes to the ledger's receipts topic
  before its first message and is announced; each receipt's body goes to the service's callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from paho.mqtt.client import MQTT_ERR_SUCCESS

from agent.config.upstreams import MqttUpstream
from agent.core.receipts import topic_level
from agent.core.redact import mask_url
from agent.core.send_outcome import DELIVERED, SendOutcome, classify_mqtt_reason, retry
from agent.sinks.encode import Event, batch_body, render_topic
from agent.sinks.tls import read_secret, tls_context

log = logging.getLogger(__name__)


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


class _Window:
    """One connection's messages handed to paho and not yet acknowledged, by message id."""

    def __init__(self, client: aiomqtt.Client, ack_timeout_s: float) -> None:
        self.client = client
        self.paho: Any = client._client
        self.lost: asyncio.Future[None] = client._disconnected  # no public API for "the connection is gone"
        self.ack_timeout_s = ack_timeout_s
        self.pending: dict[int, tuple[_Batch, int, float]] = {}  # mid -> (batch, index, handed at)
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self.lost.add_done_callback(self._on_lost)

    def offer(self, batch: _Batch, messages: list[tuple[str, list[Event], bytes]]) -> None:
        """Hand `messages` to paho in order; each is settled on its PUBACK, timeout or the loss."""
        if self.lost.done():
            for i in range(len(messages)):
                batch.settle(i, retry("connection lost before this message was sent"))
            return
        now = self._loop.time()
        for i, (topic, _, body) in enumerate(messages):
            try:
                info = self.paho.publish(topic, body, 1)
            except (ValueError, OSError) as exc:  # a topic paho refuses, a payload too large
                batch.settle(i, retry(f"connection error: {exc}"))
                continue
            if info.rc != MQTT_ERR_SUCCESS:
                batch.settle(i, retry(f"connection error: could not publish (paho rc {info.rc})"))
            else:
                self.pending[info.mid] = (batch, i, now)
        if self.pending and self._timer is None:
            self._timer = self._loop.call_later(self._tick(), self._check)

    def acked(self, mid: int, rc: Any) -> None:
        """paho's `on_publish`: the PUBACK of message `mid` (with its v5 reason code)."""
        item = self.pending.pop(mid, None)
        if item is None:
            return
        batch, i, _ = item
        if getattr(rc, "is_failure", False):
            batch.settle(i, classify_mqtt_reason(int(rc.value), str(rc)))
        else:
            batch.settle(i, DELIVERED)

    def forget(self, batch: _Batch) -> None:
        """Stop waiting for the messages of `batch` (its caller gave up)."""
        for mid in [mid for mid, item in self.pending.items() if item[0] is batch]:
            del self.pending[mid]

    def _tick(self) -> float:
        return max(0.05, min(1.0, self.ack_timeout_s / 4))

    def _check(self) -> None:
        """The oldest messages first: any without a PUBACK after `ack_timeout_s` comes back `retry`."""
        self._timer = None
        limit = self._loop.time() - self.ack_timeout_s
        expired = []
        for mid, (_, _, at) in self.pending.items():
            if at > limit:
                break
            expired.append(mid)
        for mid in expired:
            batch, i, _ = self.pending.pop(mid)
            batch.settle(i, retry(f"connection error: no PUBACK within {self.ack_timeout_s:g} s"))
        if self.pending:
            self._timer = self._loop.call_later(self._tick(), self._check)

    def _on_lost(self, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled():
            fut.exception()  # retrieved: the loss is reported per message below
        self.close()

    def close(self) -> None:
        """Every message not acknowledged comes back as `retry`."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self.pending = self.pending, {}
        for batch, i, _ in pending.values():
            batch.settle(i, retry("connection lost while waiting for PUBACK"))


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
        self._calls = 0  # publish() calls in progress
        self._receipts: tuple[str, Callable[[bytes], None], Callable[[], None]] | None = None
        self._will: aiomqtt.Will | None = None

    def will_status(self, gateway: str, body: bytes) -> None:
        """Connect with an MQTT Will: `body` retained at QoS 1 on the status topic, which the broker
        publishes when a connection ends without a DISCONNECT (a clean stop sends one: no Will)."""
        self._will = aiomqtt.Will(self._status_topic(gateway), body, qos=1, retain=True)

    def listen_for_receipts(
        self, topic: str, on_receipt: Callable[[bytes], None], on_connection: Callable[[], None]
    ) -> None:
        """Subscribe every connection to `topic` (QoS 1) before it publishes; `on_receipt(body)` for
        each message on it, `on_connection()` once each new connection is subscribed."""
        self._receipts = (topic, on_receipt, on_connection)

    async def publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        self._calls += 1
        try:
            return await self._publish(events)
        finally:
            self._calls -= 1

    async def _publish(self, events: Sequence[Event]) -> list[SendOutcome]:
        async with self._connecting:
            if self._window is None:
                if self._calls > 1:
                    # An earlier call is still in progress and lost the connection: connecting
                    # again now would let these events reach the broker before the earlier
                    # call's, which are sent again only after the forwarder's backoff.
                    return [retry("not sent: the connection was lost under an earlier batch")] * len(events)
                try:
                    client = await self._connect()
                except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                    return [retry(f"{self._where()}: connect failed: {exc}")] * len(events)
                self._client = client
                self._window = _Window(client, self.settings.ack_timeout_s)
            window = self._window
        messages = self._messages(events)
        outcomes = await self._publish_all(window, messages)
        if self._window is window and any(
            o is not DELIVERED and o.reason.startswith("connection") for o in outcomes
        ):
            await self._drop()
        return [oc for (topic, group, body), oc in zip(messages, outcomes, strict=True) for _ in group]

    @property
    def connected(self) -> bool:
        """A connection is up (publish() will not have to connect first)."""
        return self._window is not None and not self._window.lost.done()

    async def close(self) -> None:
        await self._drop()

    async def publish_status(self, gateway: str, body: bytes) -> bool:
        """The gateway's status record, retained at QoS 1 on `<site>/status/<gateway>`, on the events'
        connection. With no connection and no `publish()` in progress it connects first (a quiet
        gateway, with no events to send, comes back after a broker restart within one status
        interval instead of staying silent); False when it cannot (the next record comes in
        `status_every`)."""
        async with self._connecting:
            if self._calls == 0 and not self.connected:
                await self._drop()  # a connection the broker's restart ended, if any
                try:
                    fresh = await self._connect()
                except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                    log.debug("status record: %s: connect failed: %s", self._where(), exc)
                    return False
                self._client = fresh
                self._window = _Window(fresh, self.settings.ack_timeout_s)
        client = self._client
        if client is None or not self.connected:
            return False
        await asyncio.wait_for(
            client.publish(self._status_topic(gateway), body, qos=1, retain=True), self.settings.ack_timeout_s
        )
        return True

    # --- internals -------------------------------------------------------------

    def _status_topic(self, gateway: str) -> str:
        return f"{topic_level(self.site)}/status/{topic_level(gateway)}"

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
        self, window: _Window, messages: list[tuple[str, list[Event], bytes]]
    ) -> list[SendOutcome]:
        """Hand `messages` to the window and wait for every outcome (cancelled: all retry)."""
        if not messages:
            return []
        loop = asyncio.get_running_loop()
        batch = _Batch([None] * len(messages), len(messages), loop.create_future())
        window.offer(batch, messages)
        try:
            await asyncio.shield(batch.done)
        except asyncio.CancelledError:
            # The caller gave up (the drain is over): these messages stay pending (paho may still
            # send some; at least once). The connection is dropped by close().
            window.forget(batch)
            for i in range(len(messages)):
                batch.settle(i, retry("stopped before the upstream acknowledged"))
            raise
        return [oc if oc is not None else retry("not sent") for oc in batch.outcomes]

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
            keepalive=int(s.keepalive_s),  # a duration in the config; whole seconds (problems() says so)
            timeout=s.connect_timeout_s,
            max_inflight_messages=s.max_inflight,
            tls_context=tls_context(s.ca_file, s.cert_file, s.key_file) if secure else None,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            logger=_quiet_logger(),
            will=self._will,
        )
        client.pending_calls_threshold = s.max_inflight + 10
        self._track(client)
        await asyncio.wait_for(client.__aenter__(), s.connect_timeout_s + 1.0)
        log.info("mqtt connected upstream=%s url=%s client_id=%s", self.name, mask_url(s.url), self.client_id)
        if self._receipts is not None:
            topic, on_receipt, on_connection = self._receipts
            paho: Any = client._client
            paho.on_message = lambda _c, _u, msg: on_receipt(bytes(msg.payload))
            try:
                await asyncio.wait_for(client.subscribe(topic, qos=1), s.connect_timeout_s)
            except BaseException:
                with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
                    await asyncio.wait_for(client.__aexit__(None, None, None), 2.0)
                raise
            on_connection()
        return client

    def _track(self, client: aiomqtt.Client) -> None:
        """PUBACKs (with their v5 reason codes) go to this connection's window; aiomqtt's own
        `on_publish` still runs (it finds nothing of ours to resolve)."""
        paho: Any = client._client
        on_publish = paho.on_publish

        def tracked_on_publish(c: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
            window = self._window
            if window is not None and window.client is client:
                window.acked(mid, rc)
            on_publish(c, userdata, mid, rc, props)

        paho.on_publish = tracked_on_publish

    async def _drop(self) -> None:
        client, self._client = self._client, None
        window, self._window = self._window, None
        if window is not None:
            window.close()
        if client is None:
            return
        with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
            await asyncio.wait_for(client.__aexit__(None, None, None), 2.0)

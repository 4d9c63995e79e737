"""One Sparkplug MQTT session: CONNECT with the NDEATH Will, publish at QoS 0 with `seq`, and
the NCMD and STATE messages that come in (aiomqtt 2.5 / paho 2.2).

* CONNECT: MQTT 3.1.1, clean session, the Will = NDEATH (QoS 1, retain false) with `bdSeq`.
* `seq` is owned here: `publish()` stamps it (NBIRTH 0, +1 per message, 255 wraps to 0) and
  only the forwarder's task calls `publish()`, so the order of `seq` is the order on the wire.
* Data is handed to paho at QoS 0 (no future per message, as `agent.sinks.mqtt` does for
  QoS 1); `flow()` waits while more than `MAX_UNWRITTEN` messages are not yet written to the
  socket, so memory holds a bounded queue whatever the backlog.
* Subscriptions: NCMD (QoS 1) and, with a primary host, its STATE topics (QoS 1). Every
  message is kept in `inbox` for the forwarder; nothing here decides what it means.
* The end of the connection (`lost`) is paho's disconnect; a publish that paho refuses
  (not connected) also says the session is broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from paho.mqtt.client import MQTT_ERR_SUCCESS

from agent.config.sparkplug import SparkplugUpstream
from agent.core.redact import mask_url
from agent.sinks.tls import read_secret, tls_context
from agent.sparkplug.host import state_topic, state_topic_v22, topic
from agent.sparkplug.mapping import node_death
from agent.sparkplug.payload import PbPayload, encode, payload

log = logging.getLogger(__name__)

MAX_UNWRITTEN = 2000  # QoS 0 messages handed to paho and not yet written to the socket
LOW_WATER = 500


class SessionBroken(Exception):
    """The connection is gone (or paho refused a publish)."""


def now_ms() -> int:
    return int(time.time() * 1000)


class Session:
    """A connected Sparkplug edge-node session. Use `await Session.open(...)`, then `close()`."""

    def __init__(self, client: aiomqtt.Client, settings: SparkplugUpstream, node: str, bd_seq: int) -> None:
        self.client = client
        self.paho: Any = client._client
        self.settings = settings
        self.group = settings.group_id
        self.node = node
        self.bd_seq = bd_seq
        self.seq = -1  # the next publish() stamps seq + 1 (the NBIRTH resets it to 0)
        self.lost: asyncio.Future[None] = client._disconnected  # no public API for "the connection is gone"
        self.inbox: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.arrived = asyncio.Event()
        self._unwritten = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, settings: SparkplugUpstream, *, node: str, bd_seq: int, client_id: str) -> Session:
        """Connect (clean session, NDEATH Will with `bd_seq`) and subscribe to NCMD and STATE."""
        s = settings
        url = urlsplit(s.url)
        secure = url.scheme == "mqtts"
        password = read_secret(s.password_file) if s.password_file else None
        will = aiomqtt.Will(topic(s.group_id, "NDEATH", node), death_payload(bd_seq), qos=1, retain=False)
        client = aiomqtt.Client(
            url.hostname or "localhost",
            url.port or (8883 if secure else 1883),
            username=s.username,
            password=password,
            identifier=client_id,
            protocol=aiomqtt.ProtocolVersion.V311,
            clean_session=True,
            will=will,
            keepalive=max(1, int(s.keepalive_s)),
            timeout=s.connect_timeout_s,
            tls_context=tls_context(s.ca_file, s.cert_file, s.key_file) if secure else None,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            logger=logging.getLogger("agent.sparkplug.aiomqtt"),
            max_queued_outgoing_messages=0,
        )
        await asyncio.wait_for(client.__aenter__(), s.connect_timeout_s + 1.0)
        session = cls(client, settings, node, bd_seq)
        try:
            session._track()
            await client.subscribe(topic(s.group_id, "NCMD", node), qos=1)
            if s.primary_host_id:
                await client.subscribe(state_topic(s.primary_host_id), qos=1)
                if s.state_v22:
                    await client.subscribe(state_topic_v22(s.primary_host_id), qos=1)
        except BaseException:
            await session.close(graceful=False)
            raise
        session._reader = asyncio.create_task(session._read(), name=f"sparkplug-inbox[{s.name}]")
        log.info(
            "sparkplug connected upstream=%s url=%s node=%s/%s bdSeq=%d client_id=%s",
            s.name,
            mask_url(s.url),
            s.group_id,
            node,
            bd_seq,
            client_id,
        )
        return session

    @property
    def broken(self) -> bool:
        return self.lost.done()

    def publish(self, verb: str, device: str | None, body: PbPayload, *, first: bool = False) -> int:
        """Publish `body` (its metrics; `payload.payload()`) at QoS 0, stamped with the time and
        the next `seq` (`first`: seq 0, an NBIRTH); returns the seq used. Raises SessionBroken
        when the connection is gone."""
        if self.lost.done():
            raise SessionBroken("connection lost")
        self.seq = 0 if first else (self.seq + 1) % 256
        data = encode(body, now_ms(), self.seq)
        info = self.paho.publish(topic(self.group, verb, self.node, device), data, 0)
        if info.rc != MQTT_ERR_SUCCESS:
            raise SessionBroken(f"paho refused the publish (rc {info.rc})")
        self._unwritten += 1
        if self._unwritten >= MAX_UNWRITTEN:
            self._writable.clear()
        return self.seq

    async def flow(self) -> None:
        """Wait until paho has written most of what it was handed (or the connection is gone)."""
        if self._writable.is_set():
            return
        lost: asyncio.Future[Any] = asyncio.ensure_future(asyncio.shield(self.lost))
        writable: asyncio.Future[Any] = asyncio.ensure_future(self._writable.wait())
        try:
            await asyncio.wait({lost, writable}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (lost, writable):
                f.cancel()
            await asyncio.gather(lost, writable, return_exceptions=True)
        if self.lost.done():
            raise SessionBroken("connection lost")

    async def flush(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until every message handed over is written."""
        end = time.monotonic() + timeout_s
        while self._unwritten > 0 and not self.lost.done() and time.monotonic() < end:
            await asyncio.sleep(0.01)

    async def close(self, *, graceful: bool = True) -> None:
        """`graceful`: publish NDEATH (QoS 1, awaited) first, then disconnect; else just drop."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if graceful and not self.lost.done():
            with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
                await self.flush(2.0)
                await asyncio.wait_for(
                    self.client.publish(
                        topic(self.group, "NDEATH", self.node), death_payload(self.bd_seq), qos=1
                    ),
                    2.0,
                )
        with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
            await asyncio.wait_for(self.client.__aexit__(None, None, None), 2.0)
        if not self.lost.done():
            self.lost.cancel()
        elif not self.lost.cancelled():
            self.lost.exception()  # retrieved: the loss was reported as the session's end

    def _track(self) -> None:
        """Count messages written to the socket (paho's `on_publish` at QoS 0)."""
        on_publish = self.paho.on_publish

        def tracked(c: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
            self._unwritten = max(0, self._unwritten - 1)
            if self._unwritten <= LOW_WATER:
                self._writable.set()
            on_publish(c, userdata, mid, rc, props)

        self.paho.on_publish = tracked

    async def _read(self) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async for msg in self.client.messages:
                payload = msg.payload if isinstance(msg.payload, bytes) else str(msg.payload).encode()
                self.inbox.put_nowait((msg.topic.value, payload))
                self.arrived.set()


def death_payload(bd_seq: int) -> bytes:
    """NDEATH: the bdSeq metric, no seq."""
    now = now_ms()
    return encode(payload(node_death(bd_seq, now)), now, None)


def client_id_for(gateway: str, name: str) -> str:
    return f"edge-agent-{gateway}-{name}-sparkplug-{os.getpid()}"

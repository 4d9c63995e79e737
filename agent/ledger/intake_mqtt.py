"""MQTT intake: QoS 1, a persistent session, PUBACK only after COMMIT, then receipts.

* `clean_start=False` and a session expiry (default 7 days): a ledger killed at any point gets
  back, under its stable `client_id`, every message it had not acknowledged.
* With `group`, `$share/<group>/<topic>` (instances split the stream); otherwise a plain
  subscription, which Mosquitto 2.0 keeps over a restart where it does not keep a shared one.
* Manual acknowledgement through paho's `manual_ack_set(True)` on aiomqtt's private `_client`
  (pinned `aiomqtt<3`; the tests fail if an upgrade breaks it): a message is acknowledged only
  after the transaction holding its arrival committed; while PostgreSQL is away, nothing.
* A body that is neither a CloudEvent nor a batch of them is a `rejected` arrival, acknowledged.
* Receive Maximum is two batches, so receiving the next overlaps the commit of one.
* Receipts: after the commit, one QoS 1 receipt per gateway store in the batch, handed to paho
  without waiting (a lost one is made good by the gateway's resend).
* Never wrap the message iterator in a timeout while a batch is open.

The reasons in full: docs/architecture.md, "The ledger's MQTT intake".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from agent.core.contract import Rejection
from agent.core.receipts import receipts_for
from agent.core.timestamps import format_timestamp
from agent.ledger import failover
from agent.ledger.arrivals import Arrival
from agent.ledger.cloudevents import UNKNOWN_GATEWAY, BodyError, parse_body
from agent.ledger.config import MqttIntake
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.writer import Writer

log = logging.getLogger(__name__)

GATHER_S = 0.05  # how long a batch waits for more messages after its first
RECONNECT_S = (0.5, 1.0, 2.0, 5.0)
LEGACY_GROUP = "ledger"  # the group a ledger without `group` used to share
RECEIVE_WINDOWS = 2  # Receive Maximum = this many batches: the next batch arrives while one commits


def arrivals_of(payload: bytes, now: str) -> list[Arrival]:
    """The arrivals of one MQTT message (a rejected arrival when the body is unusable)."""
    batch = payload.lstrip()[:1] == b"["
    try:
        return parse_body(payload, batch=batch, via="mqtt", now=now)
    except BodyError as exc:
        return [Arrival(Rejection(payload, str(exc), now, "mqtt"), UNKNOWN_GATEWAY, "mqtt")]


class MqttSubscriber:
    """One instance's member of the shared subscription, feeding the Writer."""

    def __init__(self, settings: MqttIntake, writer: Writer) -> None:
        self.settings = settings
        self.writer = writer
        self.committed_messages = 0
        self.connected = False  # subscribed on a live connection
        # Subscriptions this client id's persistent session may still hold and must not: the one a
        # reload replaced (the broker keeps a session's subscriptions across reconnects).
        self.forget: tuple[str, ...] = ()
        self._settle = asyncio.Lock()  # held from a batch's commit to its last PUBACK
        self._warned = False

    def _client(self) -> aiomqtt.Client:
        s = self.settings
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = s.session_expiry_s
        # Two batches in flight: while one commits (and stays unacknowledged), the broker already
        # sends the next, so receiving it overlaps the commit instead of following it.
        props.ReceiveMaximum = min(65535, RECEIVE_WINDOWS * s.batch)
        password = (
            Path(s.password_file).read_text(encoding="utf-8").rstrip("\r\n") if s.password_file else None
        )
        client = aiomqtt.Client(
            s.host,
            s.port,
            identifier=s.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=False,
            properties=props,
            username=s.username,
            password=password,
            timeout=10,
        )
        client._client.manual_ack_set(True)
        return client

    async def run(self, stop: asyncio.Event) -> None:
        """Receive until `stop`; reconnects with backoff. Returns after the open batch settled."""
        failures = 0
        while not stop.is_set():
            client = self._client()
            try:
                async with client:
                    await client.subscribe(self.settings.subscription, qos=1)
                    if self.settings.group is None:
                        # Before 2026-12-06 a ledger without `group` subscribed `$share/ledger/...`; its
                        # persistent session may still hold that subscription, which would deliver
                        # every message twice (one arrival, by its key, but twice the work).
                        await client.unsubscribe(f"$share/{LEGACY_GROUP}/{self.settings.topic}")
                    for old in self.forget:
                        await client.unsubscribe(old)
                    if self.settings.group is not None and failures == 0 and not self._warned:
                        self._warned = True
                        log.warning(
                            "mqtt intake: a shared subscription is not restored after a broker restart"
                            " (Mosquitto 2.0): events the gateways publish before this instance subscribes"
                            " again are lost unless their upstream has `receipts: true` (docs/upstream.md)"
                        )
                    log.info(
                        "mqtt intake subscribed %s as %s", self.settings.subscription, self.settings.client_id
                    )
                    failures = 0
                    self.connected = True
                    try:
                        await self._until_stopped(client, stop)
                    finally:
                        self.connected = False
            except aiomqtt.MqttError as exc:
                if stop.is_set():
                    break
                delay = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
                failures += 1
                log.warning("mqtt intake: %s; reconnecting in %.1f s", exc, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    async def _until_stopped(self, client: aiomqtt.Client, stop: asyncio.Event) -> None:
        reader = asyncio.create_task(self._consume(client, stop), name="mqtt-intake")
        stopper = asyncio.create_task(stop.wait(), name="mqtt-intake-stop")
        try:
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not reader.done():
                async with self._settle:  # let an open batch commit and acknowledge first
                    reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopper

    async def _consume(self, client: aiomqtt.Client, stop: asyncio.Event) -> None:
        it = client.messages.__aiter__()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            batch = [await it.__anext__()]
            async with self._settle:
                deadline = loop.time() + GATHER_S
                while len(batch) < self.settings.batch:
                    if len(client.messages):
                        batch.append(await it.__anext__())
                    elif loop.time() >= deadline:
                        break
                    else:
                        await asyncio.sleep(0.002)
                arrivals = await self._commit(batch, stop)
                if arrivals is None:
                    return  # stopping while PostgreSQL is away: the batch stays unacknowledged
                for m in batch:
                    client._client.ack(m.mid, m.qos)
                self.committed_messages += len(batch)
                if self.settings.receipts:
                    self._send_receipts(client, arrivals)

    def _send_receipts(self, client: aiomqtt.Client, arrivals: list[Arrival]) -> None:
        """One receipt per gateway store of the committed batch, handed to paho (QoS 1)."""
        for topic, body in receipts_for(((a.gateway, a.outbox) for a in arrivals), self.settings.client_id):
            client._client.publish(topic, body, 1)

    async def _commit(self, batch: list[Any], stop: asyncio.Event) -> list[Arrival] | None:
        """Commit the batch's arrivals (returned); while PostgreSQL is away, retry with backoff
        (nothing is acknowledged). None when asked to stop first: the batch comes back on the next
        session."""
        now = format_timestamp(datetime.now(UTC))
        arrivals = [a for m in batch for a in arrivals_of(bytes(m.payload), now)]
        while True:
            try:
                await self.writer.record(arrivals)
                return arrivals
            except LedgerUnavailable:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.writer.retry_after_s)
                if stop.is_set():
                    return None
                failover.GAUGES.batches_rerun += 1  # the same arrivals: their keys make it idempotent

"""The MQTT sink's window: overlapping publish calls keep call order, a missing PUBACK is a retry.

Order and delivery run against the machine's Mosquitto on 127.0.0.1:1883. A broker that
accepts a connection and then never acknowledges a publish cannot be made with Mosquitto, so
that one fault is a tiny TCP peer that answers CONNECT with CONNACK and then stays silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator

import aiomqtt
import pytest

from agent.config.upstreams import MqttUpstream
from agent.core.contract import Delivery, payload_hash
from agent.core.records import Entry, Transition
from agent.core.send_outcome import DELIVERED, Verdict
from agent.sinks.encode import Event, encode
from agent.sinks.mqtt import MqttSink

STORE_ID = "00000000-0000-4000-8000-000000000000"  # the store the entries would come from

pytestmark = pytest.mark.timeout(60)


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def events(first: int, count: int, site: str) -> list[Event]:
    out = []
    for n in range(first, first + count):
        ts = "2026-04-22T08:00:00.000Z"
        d = Delivery(
            source="PUMP-07/Trip",
            transition_id=str(n),
            boot_id="B17",
            source_timestamp=ts,
            arrival_at=ts,
            payload={"n": n},
            payload_hash=payload_hash({"n": n}, ts),
            raw="{}",
            receiver="test",
        )
        rec = Transition(n, d.source or "", str(n), "B17", ts, d.payload_json, ts)
        entry = Entry(n, "transition", n, 1, rec)
        out.append(encode(entry, site=site, gateway="gw", replayed=False, store_id=STORE_ID))
    return out


@pytest.mark.broker
@pytest.mark.skipif(
    not listening(1883), reason="no MQTT broker listens on 127.0.0.1:1883 (install mosquitto)"
)
async def test_overlapping_publish_calls_are_delivered_and_reach_the_broker_in_call_order() -> None:
    site = f"win-{uuid.uuid4().hex[:8]}"
    up = MqttUpstream(
        "central", "mqtt://127.0.0.1:1883", topic="{site}/events/{device}/{channel}", max_inflight=20
    )
    sink = MqttSink(up, site=site, gateway="gw")
    seen: list[str] = []
    got_all = asyncio.Event()
    async with aiomqtt.Client("127.0.0.1", 1883, identifier=f"sub-{site}") as sub:
        await sub.subscribe(f"{site}/#", qos=1)

        async def collect() -> None:
            async for m in sub.messages:
                seen.append(json.loads(bytes(m.payload))["id"])  # type: ignore[arg-type]
                if len(seen) == 300:
                    got_all.set()

        collector = asyncio.create_task(collect())
        try:
            # Three calls at once, 100 events each, through a window of 20: the later calls
            # queue behind the earlier ones.
            outcomes = await asyncio.gather(*(sink.publish(events(1 + 100 * k, 100, site)) for k in range(3)))
            await asyncio.wait_for(got_all.wait(), 20)
        finally:
            collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await collector
            await sink.close()
    assert [o for batch in outcomes for o in batch] == [DELIVERED] * 300
    assert seen == [f"B17:{n}" for n in range(1, 301)]


@contextlib.asynccontextmanager
async def silent_broker(connections: list[int] | None = None) -> AsyncIterator[int]:
    """A peer that answers CONNECT with CONNACK (MQTT 3.1.1, accepted) and never sends a PUBACK."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if connections is not None:
            connections.append(1)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.read(1)  # the CONNECT packet starts; its content does not matter here
            writer.write(b"\x20\x02\x00\x00")
            await writer.drain()
            while await reader.read(65536):
                pass  # PUBLISH, PINGREQ, ...: swallowed
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_a_message_without_puback_comes_back_retry_after_the_ack_timeout_and_the_connection_is_dropped() -> (
    None
):
    async with silent_broker() as port:
        up = MqttUpstream("central", f"mqtt://127.0.0.1:{port}", topic="t/{device}", ack_timeout_s=0.3)
        sink = MqttSink(up, site="s", gateway="gw")
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            outcomes = await sink.publish(events(1, 5, "s"))
            took = loop.time() - t0
            assert [o.verdict for o in outcomes] == [Verdict.RETRY] * 5
            assert all("no PUBACK within 0.3 s" in o.reason for o in outcomes)
            assert took >= 0.3
            assert sink._window is None  # dropped: the next publish connects again
        finally:
            await sink.close()


async def test_a_call_that_would_reconnect_while_an_earlier_one_is_still_failing_sends_nothing() -> None:
    # The earlier call lost its connection and is still closing it: a later call must not
    # connect again and send its events first (the earlier ones go out again after the backoff).
    connections: list[int] = []
    async with silent_broker(connections) as port:
        up = MqttUpstream("central", f"mqtt://127.0.0.1:{port}", topic="t/{device}", ack_timeout_s=0.3)
        sink = MqttSink(up, site="s", gateway="gw")
        try:
            first = asyncio.create_task(sink.publish(events(1, 3, "s")))
            async with asyncio.timeout(10):
                while sink._window is None or sink._window.pending:  # connected, then timed out
                    await asyncio.sleep(0)
                while sink._window is not None:  # the first call is dropping the connection
                    await asyncio.sleep(0)
            assert not first.done()
            later = await sink.publish(events(4, 2, "s"))
            assert [o.verdict for o in later] == [Verdict.RETRY] * 2
            assert all(o.reason.startswith("not sent") for o in later)
            assert [o.verdict for o in await first] == [Verdict.RETRY] * 3
            assert len(connections) == 1
        finally:
            await sink.close()

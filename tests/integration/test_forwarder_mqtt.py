"""Forwarder -> MQTT sink -> Mosquitto -> a subscriber, with real brokers.

The machine's Mosquitto on 127.0.0.1:1883 for the plain path, and a private
Mosquitto on a free port that the test stops and starts again for the outage.
A subscriber with a persistent session (clean_session=False) sees what was
published while it was reconnecting, as a real upstream consumer would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from agent.config.upstreams import Backoff, MqttUpstream
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.store.store import Store

GW, UP = "gw-test", "central"
SOURCES = ("PUMP-07/Trip", "PUMP-07/Overload", "COMP-02/OverTemp")
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


pytestmark = [
    pytest.mark.broker,
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        not listening(1883), reason="no MQTT broker listens on 127.0.0.1:1883 (install mosquitto)"
    ),
]


def deliveries(first: int, count: int) -> list[Delivery]:
    out = []
    for n in range(first, first + count):
        obj = {"source": SOURCES[n % len(SOURCES)], "transitionId": n, "bootId": "B17", "payload": {"n": n}}
        got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(got, Delivery)
        out.append(got)
    return out


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await cond():
            await asyncio.sleep(0.02)


class Subscriber:
    """Collects every message under `<site>/#` at QoS 1, reconnecting with a persistent session."""

    def __init__(self, port: int, site: str) -> None:
        self.port, self.site = port, site
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.subscribed = asyncio.Event()
        self.stop = asyncio.Event()
        self.ident = f"collector-{uuid.uuid4().hex[:8]}"

    async def run(self) -> None:
        while not self.stop.is_set():
            try:
                client = aiomqtt.Client("127.0.0.1", self.port, identifier=self.ident, clean_session=False)
                async with client:
                    await client.subscribe(f"{self.site}/#", qos=1)
                    self.subscribed.set()
                    async for m in client.messages:
                        self.messages.append((m.topic.value, json.loads(bytes(m.payload))))  # type: ignore[arg-type]
            except aiomqtt.MqttError:
                self.subscribed.clear()
                await asyncio.sleep(0.1)

    def distinct(self) -> set[tuple[str, str]]:
        return {(e["source"], e["id"]) for _, e in self.messages}


@contextlib.asynccontextmanager
async def subscribed(port: int, site: str) -> AsyncIterator[Subscriber]:
    sub = Subscriber(port, site)
    task = asyncio.create_task(sub.run(), name="subscriber")
    await asyncio.wait_for(sub.subscribed.wait(), 10)
    try:
        yield sub
    finally:
        sub.stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def forwarding(store: Store, up: MqttUpstream, site: str) -> AsyncIterator[Forwarder]:
    sink = build_sink(up, site=site, gateway=GW)
    fwd = Forwarder(store, sink, up, site=site, gateway=GW, idle_poll_s=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(fwd.run(stop, drain_s=1.0), name=f"forwarder[{up.name}]")
    await asyncio.wait_for(fwd.started.wait(), 10)
    try:
        yield fwd
    finally:
        stop.set()
        await task
        await sink.close()


async def delivered_count(store: Store) -> int:
    rows = await store.db.execute_fetchall("SELECT count(*) FROM outbox WHERE state = 'delivered'")
    return int(next(iter(rows))[0])


def first_seen(messages: list[tuple[str, dict[str, Any]]]) -> dict[str, list[str]]:
    seen: set[tuple[str, str]] = set()
    order: dict[str, list[str]] = {}
    for _, e in messages:
        if e["type"] == "io.edgeagent.transition" and (e["source"], e["id"]) not in seen:
            seen.add((e["source"], e["id"]))
            order.setdefault(e["source"], []).append(e["id"])
    return order


def expected_order(site: str, last: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in range(1, last + 1):
        out.setdefault(f"{site}/{SOURCES[n % len(SOURCES)]}", []).append(f"B17:{n}")
    return out


async def test_events_reach_the_machine_broker_and_are_marked_on_puback(store: Store) -> None:
    site = f"test-{uuid.uuid4().hex[:8]}"
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    up = MqttUpstream(UP, "mqtt://127.0.0.1:1883", backoff=Backoff(0.05, 0.5))
    async with subscribed(1883, site) as sub, forwarding(store, up, site) as fwd:
        await store.record(deliveries(1, 120))

        async def all_there() -> bool:
            return len(sub.distinct()) == 122 and await delivered_count(store) == 122

        async def accounted() -> bool:  # the forwarder counts after the settle has committed
            return fwd.state.delivered == 122

        await eventually(all_there)
        await eventually(accounted)
        assert fwd.state.up is True
    assert first_seen(sub.messages) == expected_order(site, 120)
    topics = {t for t, e in sub.messages if e["id"] == "B17:1"}
    assert topics == {f"{site}/events/PUMP-07/Overload"}
    boots = [e for _, e in sub.messages if e["type"] == "io.edgeagent.boot_observed"]
    assert {(e["source"], e["id"]) for e in boots} == {(f"{site}/PUMP-07", "B17"), (f"{site}/COMP-02", "B17")}


class PrivateBroker:
    """A Mosquitto of our own on a free port, with persistence, that can be stopped and started again."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        (tmp / "mq").mkdir()
        self.conf = tmp / "mq" / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n"
            f"persistence true\npersistence_location {tmp / 'mq'}/\nuser root\n"
        )
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            MOSQUITTO,
            "-c",
            str(self.conf),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        async with asyncio.timeout(10):
            while not listening(self.port):
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()  # SIGTERM: mosquitto saves its sessions to the persistence file
            await self.proc.wait()


@pytest.mark.skipif(shutil.which("mosquitto") is None and not Path(MOSQUITTO).exists(), reason="no mosquitto")
async def test_broker_down_then_back_the_backlog_is_drained_in_order_with_stable_ids(
    store: Store, tmp_path: Path
) -> None:
    site = "plant-1"
    broker = PrivateBroker(tmp_path)
    await broker.start()
    try:
        await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
        up = MqttUpstream(
            UP,
            f"mqtt://127.0.0.1:{broker.port}",
            backoff=Backoff(0.05, 0.3),
            ack_timeout_s=2,
            connect_timeout_s=2,
        )
        async with subscribed(broker.port, site) as sub, forwarding(store, up, site) as fwd:
            await store.record(deliveries(1, 50))

            async def first_part() -> bool:
                return await delivered_count(store) == 52

            await eventually(first_part)
            await broker.stop()
            for start in range(51, 351, 50):  # the upstream is down; events accumulate
                await store.record(deliveries(start, 50))
                await asyncio.sleep(0.05)

            async def noticed() -> bool:
                return fwd.state.up is False

            await eventually(noticed)
            await broker.start()
            canonical = int((await store.db.execute_fetchall("SELECT count(*) FROM events"))[0][0])

            async def all_there() -> bool:
                return len(sub.distinct()) == canonical + 2 and await delivered_count(store) == canonical + 2

            await eventually(all_there)
        assert canonical == 350
        assert first_seen(sub.messages) == expected_order(site, 350)
        late = [e for _, e in sub.messages if e["id"] == "B17:300"]
        assert late and all(e["replayed"] is True for e in late)
        early = [e for _, e in sub.messages if e["id"] == "B17:10"]
        assert early[0]["replayed"] is False and early[0]["attempt"] == 1
    finally:
        await broker.stop()


async def test_every_duration_of_an_mqtt_upstream_as_check_takes_it_connects_and_delivers(
    store: Store, tmp_path: Path
) -> None:
    """`keepalive: 5s` passed `check` and then crashed every forwarder start (issue 36: the client
    wants whole seconds); a config `check` accepts must run: every duration key of an MQTT upstream,
    written as the docs write it, through the loader and into a real connection."""
    from agent.config import loader as config

    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "site: plant\ngateway: gw\nstore: {path: /tmp/x.db}\n"
        "upstreams:\n  - name: central\n    mqtt: {url: 'mqtt://127.0.0.1:1883', keepalive: 5s,"
        " connect_timeout: 3s, ack_timeout: 2500ms, receipt_timeout: 90s, backoff: {initial: 100ms, max: 2s}}\n"
        "devices:\n  - name: PUMP-07\n    connections: [{modbus: {host: 10.0.0.7}}]\n"
        "    boot_id: {register: 0, type: uint32}\n"
        "    channels: {Trip: {transition_id: {register: 2, type: uint32}, state: {register: 11, table: coil}}}\n"
    )
    (up,) = config.load(cfg, check_files=False).upstreams
    assert isinstance(up, MqttUpstream)
    assert (up.keepalive_s, up.connect_timeout_s, up.ack_timeout_s, up.receipt_timeout_s) == (
        5.0,
        3.0,
        2.5,
        90.0,
    )
    assert up.backoff == Backoff(0.1, 2.0)
    site = f"test-{uuid.uuid4().hex[:8]}"
    await store.register_upstreams([(up.name, "none")], "2026-04-22T08:00:00.000Z")
    async with subscribed(1883, site) as sub, forwarding(store, up, site) as fwd:
        await store.record(deliveries(1, 3))

        async def there() -> bool:
            return len(sub.distinct()) == 5 and fwd.state.delivered == 5

        await eventually(there)

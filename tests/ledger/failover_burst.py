"""A burst from two gateways through a running ledger while its database fails over (shared by
tests/ledger/test_failover.py and bench/ledger_failover.py).

Gateway `gw-mqtt` publishes N transitions at QoS 1 through Mosquitto, gateway `gw-http` POSTs
the same N (same keys: a redundant pair) in batches, resending a refused batch as it was (same
body, same attempt) until it gets 200. The ledger runs in this process (`service.run`) with a
multi-host DSN naming both servers. At the given fractions of the burst the primary is killed
and the standby promoted (`Pair.failover`), then, with `rejoin`, a fresh standby of the new
primary is made. At the end the final primary is read: every event both gateways had
acknowledged must be a canonical there, one per key, with exactly one arrival per delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiomqtt
import psycopg
from pgcluster import Pair, free_port

from agent.ledger import service
from agent.ledger.config import HttpIntake, LedgerConfig, MqttIntake

T0 = "2026-04-22T08:00:12.120Z"
HTTP_BATCH = 20


def event(i: int, gateway: str, run: str) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"B-{run}:T{i}",
        "source": f"plant/PLC-{i % 7}/Trip",
        "type": "io.edgeagent.transition",
        "time": T0,
        "datacontenttype": "application/json",
        "bootid": f"B-{run}",
        "transitionid": f"T{i}",
        "arrivalat": T0,
        "gateway": gateway,
        "attempt": 1,
        "replayed": False,
        "data": {"state": "Trip", "i": i},
    }


@dataclass
class Figures:
    events: int
    failovers: int = 0
    mqtt_acknowledged: int = 0  # PUBACKs the publisher got from the broker
    http_acknowledged: int = 0  # events in batches answered 200
    http_refused: int = 0  # batches answered 503 / cut, resent as they were
    canonicals: int = 0
    keys: int = 0
    lost: int = 0  # keys that no gateway's arrival reached the final primary with
    lost_deliveries: dict[str, int] = field(default_factory=dict)  # acknowledged, not on the final primary
    arrivals_per_key: dict[int, int] = field(default_factory=dict)
    deliveries_with_two_arrivals: int = 0
    ledger_running: bool = False
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["arrivals_per_key"] = {str(k): v for k, v in sorted(self.arrivals_per_key.items())}
        return out


async def _mqtt_gateway(
    port: int, bodies: list[bytes], pace_s: float, progress: list[int], fig: Figures
) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"gw-mqtt-{time.monotonic_ns()}") as c:
        for i, body in enumerate(bodies):
            await c.publish("plant/events/PLC/Trip", body, qos=1)
            fig.mqtt_acknowledged += 1
            progress[0] = i + 1
            if pace_s:
                await asyncio.sleep(pace_s)


async def _http_gateway(port: int, events: list[dict[str, Any]], pace_s: float, fig: Figures) -> None:
    url = f"http://127.0.0.1:{port}/"
    headers = {"Content-Type": "application/cloudevents-batch+json"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i in range(0, len(events), HTTP_BATCH):
            body = json.dumps(events[i : i + HTTP_BATCH]).encode()
            while True:
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        await resp.read()
                        if resp.status == 200:
                            fig.http_acknowledged += len(events[i : i + HTTP_BATCH])
                            break
                        retry = float(resp.headers.get("Retry-After", "1"))
                except (aiohttp.ClientError, TimeoutError):
                    retry = 0.5
                fig.http_refused += 1
                await asyncio.sleep(min(retry, 0.5))
            if pace_s:
                await asyncio.sleep(pace_s * HTTP_BATCH)


async def _controller(pair: Pair, at: list[int], progress: list[int], rejoin: bool, fig: Figures) -> None:
    for mark in at:
        while progress[0] < mark:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(pair.failover)
        fig.failovers += 1
        if rejoin:
            await asyncio.to_thread(pair.rejoin)


def read_final(dsn: str, fig: Figures) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT (source, transition_id, boot_id)) FROM canonical_event"
        ).fetchone()
        assert row is not None
        fig.canonicals, fig.keys = int(row[0]), int(row[1])
        per_key = conn.execute(
            "SELECT n, count(*) FROM (SELECT count(*) AS n FROM arrival WHERE kind = 'transition'"
            " GROUP BY source, transition_id, boot_id) k GROUP BY n"
        ).fetchall()
        fig.arrivals_per_key = {int(n): int(c) for n, c in per_key}
        two = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM arrival GROUP BY gateway, via, source, transition_id,"
            " boot_id, attempt HAVING count(*) > 1) d"
        ).fetchone()
        assert two is not None
        fig.deliveries_with_two_arrivals = int(two[0])
        got = dict(conn.execute("SELECT gateway, count(*) FROM arrival GROUP BY gateway").fetchall())
    fig.lost = fig.events - fig.keys
    fig.lost_deliveries = {
        "gw-mqtt": fig.mqtt_acknowledged - int(got.get("gw-mqtt", 0)),
        "gw-http": fig.http_acknowledged - int(got.get("gw-http", 0)),
    }


async def run_burst(
    pair: Pair,
    broker_port: int,
    *,
    n: int,
    failover_at: list[float],
    rejoin: bool = False,
    pace_s: float = 0.002,
    dbname: str | None = None,
    run: str = "r1",
    settle_s: float = 120,
) -> Figures:
    """One burst; returns the figures read from the final primary."""
    fig = Figures(events=n)
    http_port = free_port()
    config = LedgerConfig(
        pair.dsn(dbname),
        None,
        MqttIntake("127.0.0.1", broker_port, "plant/events/#", "ledger", f"ledger-{run}"),
        HttpIntake("127.0.0.1", http_port),
        (),
        "failover_burst",
    )
    stop = asyncio.Event()
    ledger = asyncio.create_task(service.run(config, stop=stop))
    started = time.monotonic()
    try:
        await _wait_http(http_port, ledger)
        await asyncio.sleep(0.5)  # the MQTT subscription
        mqtt_bodies = [json.dumps(event(i, "gw-mqtt", run)).encode() for i in range(n)]
        http_events = [event(i, "gw-http", run) for i in range(n)]
        progress = [0]
        marks = [int(f * n) for f in failover_at]
        await asyncio.gather(
            _mqtt_gateway(broker_port, mqtt_bodies, pace_s, progress, fig),
            _http_gateway(http_port, http_events, pace_s, fig),
            _controller(pair, marks, progress, rejoin, fig),
        )
        deadline = time.monotonic() + settle_s
        seen, still = -1, 0
        while time.monotonic() < deadline:  # the broker redelivers what the ledger had not acknowledged
            read_final(pair.dsn(dbname) + " target_session_attrs=read-write", fig)
            total = sum(k * v for k, v in fig.arrivals_per_key.items())
            if total >= 2 * n:
                break
            still = still + 1 if total == seen else 0
            if still >= 20:  # 6 s without a new arrival: what is missing is lost
                break
            seen = total
            await asyncio.sleep(0.3)
        fig.ledger_running = not ledger.done()
        fig.seconds = round(time.monotonic() - started, 2)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ledger, 60)
    return fig


async def _wait_http(port: int, ledger: asyncio.Task[None]) -> None:
    for _ in range(200):
        if ledger.done():
            ledger.result()
        with contextlib.suppress(OSError):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the ledger's HTTP intake did not start")

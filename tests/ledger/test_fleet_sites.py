"""The fleet is keyed by (site, gateway) (operator.md section 3, issue 36): two sites' `gw-1` are two
gateways. An arrival's site is the one the gateway's encoder put in its CloudEvents `source`
(`arrival_site`, migration 0005); a status record names its own. End to end with a real broker:
two fleet rows, two metric series, both on the overview; one going silent, or its Will, marks only
that one."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from mosquitto import MOSQUITTO, Broker
from pgcluster import free_port

from agent.config.upstreams import MqttUpstream
from agent.core.intake import parse_delivery
from agent.core.records import BootObserved, ChannelAnomaly, Entry, IdentityIncomplete, Record, Transition
from agent.core.send_outcome import Verdict
from agent.core.timestamps import format_timestamp
from agent.ledger import arbiter, cloudevents
from agent.ledger.arrivals import from_import
from agent.ledger.connection import connect
from agent.ledger.web import queries
from agent.ledger.web.app import make_app
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard
from agent.service import status_record
from agent.sinks.encode import encode
from agent.sinks.mqtt import MqttSink

STORE_ID = "00000000-0000-4000-8000-000000000000"
T0 = "2026-04-22T08:00:12.120Z"
SESSION = format_timestamp(datetime.now(UTC))
SITES = ("plant-1", "area-9/plant-2", "x:y~z.w")  # the contract's site alphabet holds `/`, `:`, `~`


def records() -> list[tuple[str, Record]]:
    """One record of each kind the gateway sends (a channel with `/` and spaces: percent-encoded)."""
    return [
        ("transition", Transition(1, "PUMP-07/Trip", "T1", "B1", T0, "{}", T0)),
        ("transition", Transition(2, "PUMP 8/Trip/a b", "T2", "B1", T0, "{}", T0)),
        ("boot_observed", BootObserved(1, "PUMP-07", "B1", None, T0, None, True, "{}")),
        ("gap", ChannelAnomaly(1, "PUMP-07/Trip", "B1", "gap", "3", "5", T0, "{}")),
        ("anomaly", ChannelAnomaly(2, "PUMP-07/Trip", "B1", "wrap", "65535", "0", T0, "{}")),
        ("identity_incomplete", IdentityIncomplete(1, "PUMP-07/Trip", None, "B1", T0, T0, "modbus", "{}")),
        ("identity_incomplete", IdentityIncomplete(2, None, None, None, None, T0, "modbus", "{}")),
    ]


async def test_arrival_site_is_the_site_the_gateways_encoder_put_in_the_source(ledger_dsn: str) -> None:
    conn = await connect(ledger_dsn)
    try:
        for site in SITES:
            bodies = [
                encode(
                    Entry(n, kind, n, 1, rec), site=site, gateway="gw-1", replayed=False, store_id=STORE_ID
                ).body
                for n, (kind, rec) in enumerate(records(), 1)
            ]
            arrivals = cloudevents.parse_body(b"[" + b",".join(bodies) + b"]", batch=True, via="mqtt", now=T0)
            await arbiter.record(conn, arrivals)
        # An import line's source is `<device>/<channel>` (no site), a rejected arrival has none.
        line = json.dumps(
            {"source": "area/PUMP-07/Trip", "transitionId": "T9", "bootId": "B1", "arrivalAt": T0}
        )
        item = parse_delivery(line, arrival_at=T0, receiver="ledger-import:import", line=1)
        await arbiter.record(conn, [from_import(item, "gw-1")])
        await arbiter.record(
            conn, cloudevents.parse_body(b'[{"gateway": "gw-1"}]', batch=True, via="http", now=T0)
        )
        cur = await conn.execute(
            "SELECT via, kind, decision, source, arrival_site(via, kind, source) FROM arrival ORDER BY id"
        )
        rows = await cur.fetchall()
    finally:
        await conn.close()
    kinds = [k for k, _ in records()]
    assert [r[1] for r in rows[: len(kinds)]] == kinds, "every kind arrived as itself"
    for i, site in enumerate(SITES):
        got = rows[i * len(kinds) : (i + 1) * len(kinds)]
        assert all(r[2] not in ("rejected",) for r in got), got
        assert [r[4] for r in got] == [site] * len(kinds), got
    assert rows[-2][0] == "import" and rows[-2][4] == ""
    assert rows[-1][2] == "rejected" and rows[-1][4] == ""


# --- two sites, one gateway name, through a real broker -----------------------------------------


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f} s: {what}")
        await asyncio.sleep(0.1)


class Gateway:
    """One site's `gw-1` as the gateway's MQTT upstream sends: its status records (and Will body) on
    `<site>/status/gw-1`, its transitions on `<site>/events/...`."""

    def __init__(self, site: str, port: int) -> None:
        self.site = site
        # Both started in the same millisecond (a session is the process's start time): only the
        # site tells their Wills apart.
        self.session = SESSION
        self.sink = MqttSink(
            MqttUpstream(name="ledger", url=f"mqtt://127.0.0.1:{port}", client_id=f"gw-1-{site}"),
            site=site,
            gateway="gw-1",
        )
        self.n = 0

    async def status(self) -> None:
        rec = status_record.build(
            site=self.site,
            gateway="gw-1",
            at=format_timestamp(datetime.now(UTC)),
            now_s=time.time(),
            outbox=[{"upstream": "ledger", "pending": 0, "rejected": 0, "oldest_pending_at": None}],
            store_room=1_000_000,
            connections=[],
            session=self.session,
        )
        assert await self.sink.publish_status("gw-1", json.dumps(rec).encode())

    async def event(self) -> None:
        self.n += 1
        rec = Transition(self.n, "PUMP-07/Trip", f"T{self.n}", "B1", T0, "{}", T0)
        ev = encode(
            Entry(self.n, "transition", self.n, 1, rec),
            site=self.site,
            gateway="gw-1",
            replayed=False,
            store_id=STORE_ID,
        )
        (outcome,) = await self.sink.publish([ev])
        assert outcome.verdict is Verdict.DELIVERED, outcome

    async def will(self) -> None:
        body = status_record.will(site=self.site, gateway="gw-1", session=self.session)
        assert await self.sink.publish_status("gw-1", body)


async def fleet(dsn: str) -> dict[tuple[str, str], dict[str, Any]]:
    conn = await connect(dsn)
    try:
        return {(r["site"], r["gateway"]): r for r in await queries.fetch(conn, queries.FLEET)}
    finally:
        await conn.close()


def heard_series(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.findall(
        r'^edge_ledger_gateway_last_heard_timestamp_seconds\{gateway="gw-1",site="([^"]*)"\} (\S+)$',
        text,
        re.M,
    )
    return {site: float(v) for site, v in found}


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
@pytest.mark.timeout(120)
async def test_two_sites_gw_1_are_two_gateways_and_one_going_silent_marks_only_that_one(
    tmp_path: Path, ledger_dsn: str
) -> None:
    from agent.ledger import service
    from agent.ledger.config import LedgerConfig, MqttIntake
    from agent.ledger.config_views import MetricsSettings

    broker = await asyncio.to_thread(Broker, tmp_path)
    metrics_port = free_port()
    stop = asyncio.Event()
    cfg = LedgerConfig(
        dsn=ledger_dsn,
        password_file=None,
        mqtt=MqttIntake("127.0.0.1", broker.port, "+/events/#", "ledger", "ledger-sites"),
        http=None,
        notify=(),
        file="(test)",
        metrics=MetricsSettings("127.0.0.1", metrics_port),
    )
    ledger = asyncio.create_task(service.run(cfg, stop=stop))
    one, two = Gateway("plant-1", broker.port), Gateway("plant-2", broker.port)
    web = TestClient(TestServer(make_app(Pool(ledger_dsn, size=1), Guard(None), silent_after=3)))
    await web.start_server()
    try:

        async def both_heard() -> bool:
            for gw in (one, two):  # until the ledger's subscriptions are up: the first ones may be early
                await gw.status()
                await gw.event()
            rows = await fleet(ledger_dsn)
            return all(
                rows.get((s, "gw-1"), {}).get(k) is not None
                for s in ("plant-1", "plant-2")
                for k in ("last_arrival", "status_heard_at")
            )

        await until(both_heard, "a status record and an arrival of each site's gw-1")
        rows = await fleet(ledger_dsn)
        assert set(rows) == {("plant-1", "gw-1"), ("plant-2", "gw-1")}, rows
        assert {rows[k]["status"]["site"] for k in rows} == {"plant-1", "plant-2"}
        series = await asyncio.to_thread(heard_series, metrics_port)
        assert set(series) == {"plant-1", "plant-2"}, series

        # plant-2's gw-1 goes silent; plant-1's keeps publishing its status for 4 s (> silent_after).
        t_end = time.monotonic() + 4.0
        while time.monotonic() < t_end:
            await one.status()
            await asyncio.sleep(0.5)
        (doc,) = await (await web.get("/?format=json")).json()
        by_key = {(g["site"], g["gateway"]): g for g in doc["fleet"]}
        assert set(by_key) == {("plant-1", "gw-1"), ("plant-2", "gw-1")}
        assert by_key["plant-1", "gw-1"]["silent"] is False
        assert by_key["plant-2", "gw-1"]["silent"] is True
        page = await (await web.get("/")).text()
        assert re.search(r"<td>plant-1</td><td><a [^>]*>gw-1</a></td><td><span class=\"ok\">ok", page)
        assert re.search(r"<td>plant-2</td><td><a [^>]*>gw-1</a></td><td><span class=\"silent\">SILENT", page)
        series = await asyncio.to_thread(heard_series, metrics_port)
        assert series["plant-1"] - series["plant-2"] > 3.0, series

        # plant-2's Will marks plant-2's gw-1 offline, not plant-1's (same gateway name).
        await two.will()

        async def offline() -> bool:
            return (await fleet(ledger_dsn))["plant-2", "gw-1"]["status"].get("state") == "offline"

        await until(offline, "plant-2's gw-1 marked offline")
        assert (await fleet(ledger_dsn))["plant-1", "gw-1"]["status"]["state"] == "running"
        page = await (await web.get("/")).text()
        assert re.search(
            r"<td>plant-2</td><td><a [^>]*>gw-1</a></td><td><span class=\"silent\"[^>]*>OFFLINE", page
        )
        assert re.search(r"<td>plant-1</td><td><a [^>]*>gw-1</a></td><td><span class=\"ok\">ok", page)
    finally:
        await web.close()
        for gw in (one, two):
            await gw.sink.close()
        stop.set()
        await asyncio.wait_for(ledger, 30)
        await asyncio.to_thread(broker.stop)

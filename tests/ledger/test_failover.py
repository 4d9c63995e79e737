"""The ledger through a database failover (ledger.md section 7), with real parts: a primary and a
synchronous streaming standby made from the PostgreSQL binaries (`pgcluster.Pair`), our own
Mosquitto, the ledger's intakes running in this process.

* two gateways (MQTT and HTTP, the same keys), the primary killed and the standby promoted at
  40 % of the burst: every acknowledged event is a canonical on the new primary, one per key,
  exactly one arrival per delivery, the ledger still running;
* a DSN naming the standby first finds the primary; a standby-only DSN waits, says why and
  acknowledges nothing, until the standby is promoted;
* `require_sync_standby` with the standby stopped: batches are refused, then taken again once
  it streams; nothing lost.

The five-failovers-under-load campaign and the asynchronous loss are `bench/ledger_failover.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from failover_burst import event, run_burst
from mosquitto import MOSQUITTO, Broker
from pgcluster import Pair, free_port
from tcpproxy import Proxy

from agent.ledger import failover, service
from agent.ledger.cloudevents import parse_body
from agent.ledger.config import HttpIntake, LedgerConfig
from agent.ledger.errors import LedgerUnavailable
from agent.ledger.writer import Writer, conn_info


@pytest.fixture(scope="module")
def healthy_pair(pg_cluster: Any) -> Iterator[Pair]:
    p = Pair(pg_cluster.bindir)
    try:
        yield p
    finally:
        p.destroy()


@pytest.fixture
def pair(healthy_pair: Pair) -> Iterator[Pair]:
    """The module's pair with a fresh database; after a test's failover a new standby rejoins."""
    healthy_pair.new_database("f_" + uuid.uuid4().hex[:12])
    yield healthy_pair
    if healthy_pair.failed_over:
        healthy_pair.rejoin()


def batch(run: str, n: int, gateway: str = "gw") -> Any:
    body = json.dumps([event(i, gateway, run) for i in range(n)]).encode()
    return parse_body(body, batch=True, via="http", now="2026-04-22T08:00:12.120Z")


def canonicals(dsn: str) -> int:
    with psycopg.connect(dsn + " target_session_attrs=read-write") as conn:
        row = conn.execute("SELECT count(*) FROM canonical_event").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
async def test_failover_mid_burst_over_mqtt_and_http_loses_nothing_and_adds_no_second_arrival(
    pair: Pair, tmp_path: Path
) -> None:
    broker = Broker(tmp_path)
    outages = failover.GAUGES.outages
    try:
        fig = await run_burst(pair, broker.port, n=800, failover_at=[0.4], pace_s=0.002, dbname=pair.dbname)
    finally:
        broker.stop()
    assert fig.failovers == 1
    assert fig.mqtt_acknowledged == fig.http_acknowledged == 800
    assert fig.lost == 0 and fig.keys == 800, fig.as_json()
    assert fig.lost_deliveries == {"gw-mqtt": 0, "gw-http": 0}, "every acknowledged delivery is there"
    assert fig.canonicals == fig.keys, "one canonical per key"
    assert fig.arrivals_per_key == {2: 800}, f"one arrival per gateway per key: {fig.as_json()}"
    assert fig.deliveries_with_two_arrivals == 0
    assert fig.ledger_running, "the ledger reconnected by itself"
    assert failover.GAUGES.outages > outages, "the outage was seen (the failover was mid-burst)"


@pytest.mark.slow
@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
async def test_five_failovers_under_load_lose_nothing(pair: Pair, tmp_path: Path) -> None:
    """The long form (by hand: `python -m pytest -m slow tests/ledger/test_failover.py`); the same
    campaign with its figures printed: `python bench/ledger_failover.py`."""
    broker = Broker(tmp_path)
    try:
        marks = [(i + 1) / 6 for i in range(5)]
        fig = await run_burst(pair, broker.port, n=6000, failover_at=marks, rejoin=True, dbname=pair.dbname)
    finally:
        broker.stop()
    print(json.dumps(fig.as_json()))
    assert fig.failovers == 5 and fig.lost == 0 and fig.canonicals == fig.keys == 6000
    assert fig.lost_deliveries == {"gw-mqtt": 0, "gw-http": 0}
    assert fig.arrivals_per_key == {2: 6000} and fig.deliveries_with_two_arrivals == 0
    assert fig.ledger_running


async def test_a_standby_first_dsn_finds_the_primary_and_a_standby_only_dsn_waits_until_promotion(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    writer = Writer(pair.dsn(order=(pair.standby.port, pair.primary.port)))
    try:
        assert [oc.decision.value for oc in await writer.record(batch("a", 3))] == ["inserted"] * 3
        assert conn_info(writer._conn) == f"127.0.0.1:{pair.primary.port}"
    finally:
        await writer.close()

    standby_only = f"host=127.0.0.1 port={pair.standby.port} user=postgres dbname={pair.dbname}"
    http_port = free_port()
    config = LedgerConfig(standby_only, None, None, HttpIntake("127.0.0.1", http_port), (), "t")
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    ledger = asyncio.create_task(service.run(config, stop=stop))
    body = json.dumps([event(i, "gw", "b") for i in range(5)]).encode()
    headers = {"Content-Type": "application/cloudevents-batch+json"}
    try:
        async with aiohttp.ClientSession() as session:
            status = await _post_when_listening(session, http_port, body)
            assert status == 503, "a standby cannot take the batch: nothing acknowledged"
            assert not ledger.done(), "the ledger waits, it does not exit"
            said = caplog.text
            assert "unavailable" in said and ("read-only" in said or "standby" in said), said[-2000:]
            assert canonicals(pair.dsn()) == 3
            await asyncio.to_thread(pair.failover)  # the standby is the primary now
            for _ in range(100):
                async with session.post(f"http://127.0.0.1:{http_port}/", data=body, headers=headers) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.1)
            assert r.status == 200
        assert canonicals(f"host=127.0.0.1 port={pair.primary.port} user=postgres dbname={pair.dbname}") == 8
    finally:
        stop.set()
        await asyncio.wait_for(ledger, 30)


async def test_require_sync_standby_withholds_acknowledgements_while_the_standby_is_stopped(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    writer = Writer(pair.dsn(), require_sync_standby=True, clock=lambda: 0.0)
    withheld = failover.GAUGES.sync_standby_refusals
    try:
        assert len(await writer.record(batch("s1", 10))) == 10
        assert failover.GAUGES.sync_standby_ok == 1.0
        assert writer.replication is not None and writer.replication.sync_ok
        await asyncio.to_thread(pair.stop_standby)
        refused = batch("s2", 10)
        for _ in range(3):
            writer._sync_good_until = 0.0  # the frozen clock: read the state again now
            with pytest.raises(LedgerUnavailable, match="synchronous standby"):
                await writer.record(refused)
        assert failover.GAUGES.sync_standby_ok == 0.0
        assert failover.GAUGES.sync_standby_refusals == withheld + 3
        assert caplog.text.count("acknowledgements withheld") == 1, "said once per episode"
        assert canonicals(pair.dsn()) == 10, "nothing of a refused batch was written"
        await asyncio.to_thread(pair.start_standby)
        await asyncio.to_thread(pair.wait_streaming)
        assert len(await writer.record(refused)) == 10
        assert "a synchronous standby streams again" in caplog.text
        assert canonicals(pair.dsn()) == 20, "nothing lost"
    finally:
        await writer.close()


async def test_ledger_check_says_which_server_and_its_replication_state(pair: Pair) -> None:
    writer = Writer(pair.dsn())
    await writer.connect_now()  # migrates
    await writer.close()
    cmd = [sys.executable, "-m", "agent", "ledger", "--dsn", pair.dsn(), "check"]
    proc = await asyncio.to_thread(
        subprocess.run, [*cmd, "--json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["server"] == f"127.0.0.1:{pair.primary.port}"
    rep = got["replication"]
    assert rep["synchronous_standby_names"] == "FIRST 1 (*)" and rep["synchronous_commit"] == "on"
    assert [s["sync_state"] for s in rep["standbys"]] == ["sync"] and rep["sync_ok"] is True
    text = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert "commits wait for a synchronous standby" in text.stdout
    required = [*cmd, "--require-sync-standby"]
    ok = await asyncio.to_thread(subprocess.run, required, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


async def test_ledger_check_require_sync_standby_exits_69_on_a_server_without_one(ledger_dsn: str) -> None:
    writer = Writer(ledger_dsn)
    await writer.connect_now()  # migrates
    await writer.close()
    cmd = [sys.executable, "-m", "agent", "ledger", "--dsn", ledger_dsn, "check"]
    plain = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr  # the report alone never fails on replication
    assert "an acknowledged commit can be lost" in plain.stdout
    required = await asyncio.to_thread(
        subprocess.run, [*cmd, "--require-sync-standby"], capture_output=True, text=True, timeout=60
    )
    assert required.returncode == 69, (required.returncode, required.stderr)
    assert "no synchronous standby streaming" in required.stderr


async def test_the_service_passes_require_sync_standby_on_and_a_server_without_standby_gets_503(
    ledger_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`require_sync_standby: true` in the config reaches the writer: on a server with no standby
    at all every batch is refused (HTTP 503), and the log says why."""
    caplog.set_level(logging.INFO)
    http_port = free_port()
    config = LedgerConfig(
        ledger_dsn, None, None, HttpIntake("127.0.0.1", http_port), (), "t", require_sync_standby=True
    )
    stop = asyncio.Event()
    ledger = asyncio.create_task(service.run(config, stop=stop))
    body = json.dumps([event(1, "gw", "rs")]).encode()
    try:
        async with aiohttp.ClientSession() as session:
            status = await _post_when_listening(session, http_port, body)
        assert status == 503
        assert "acknowledgements withheld" in caplog.text and "standbys=none" in caplog.text
    finally:
        stop.set()
        await asyncio.wait_for(ledger, 30)
    with psycopg.connect(ledger_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM arrival").fetchone() == (0,)


async def test_a_commit_in_doubt_at_the_failover_runs_again_on_the_new_primary_with_no_second_arrival(
    pair: Pair,
) -> None:
    """The case the issue saw in every run: the COMMIT reached the (synchronous) standby, the
    ledger never heard the answer, the primary died. Made on purpose: the ledger reaches the
    primary through a proxy that cuts the connection right after COMMIT, then the primary is
    killed and the standby promoted. The batch is on the new primary before the re-run; the
    re-run gives the same decisions and adds nothing."""
    proxy = Proxy(pair.primary.port)
    await proxy.start()
    dsn = f"host=127.0.0.1,127.0.0.1 port={proxy.port},{pair.standby.port} user=postgres dbname={pair.dbname}"
    writer = Writer(dsn, clock=lambda: 0.0)
    try:
        await writer.connect_now()
        doubt = batch("doubt", 50)
        proxy.cut_after_commit()
        with pytest.raises(LedgerUnavailable):
            await writer.record(doubt)
        assert proxy.cuts == 1
        await asyncio.to_thread(pair.failover)
        new_primary = f"host=127.0.0.1 port={pair.primary.port} user=postgres dbname={pair.dbname}"
        with psycopg.connect(new_primary) as conn:
            assert conn.execute("SELECT count(*) FROM arrival").fetchone() == (50,), "it had committed"
        writer._next_try = 0.0
        again = await writer.record(doubt)
        assert [oc.decision.value for oc in again] == ["inserted"] * 50, (
            "the decisions of the run that committed"
        )
        assert conn_info(writer._conn) == f"127.0.0.1:{pair.primary.port}"
        with psycopg.connect(new_primary) as conn:
            assert conn.execute(
                "SELECT (SELECT count(*) FROM arrival), (SELECT count(*) FROM canonical_event)"
            ).fetchone() == (50, 50), "no second arrival"
    finally:
        await writer.close()
        await proxy.stop()


async def _post_when_listening(session: aiohttp.ClientSession, port: int, body: bytes) -> int:
    """POST a CloudEvents batch to the ledger's HTTP intake once it listens; its status (0: never)."""
    headers = {"Content-Type": "application/cloudevents-batch+json"}
    for _ in range(100):
        try:
            async with session.post(f"http://127.0.0.1:{port}/", data=body, headers=headers) as r:
                return r.status
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.05)
    return 0

"""MQTT intake with our own Mosquitto and a real PostgreSQL: PUBACK only after commit, a
persistent session that gives a restarted ledger back what it had not acknowledged, kill -9
during a burst, PostgreSQL away while messages arrive, a shared subscription split between two."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import psycopg
import pytest
from mosquitto import MOSQUITTO, Broker

from agent.core.records import Entry, Transition
from agent.sinks.encode import Event, batch_body, encode

STORE_ID = "00000000-0000-4000-8000-000000000000"  # the store id a gateway puts in identity-incomplete ids

pytestmark = pytest.mark.skipif(
    MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)"
)

T0 = "2026-04-22T08:00:12.120Z"
CMD = [sys.executable, "-m", "agent", "ledger"]


def events(n: int, gateway: str) -> list[Event]:
    """n transitions as the gateway's encoder makes them (same keys for every gateway)."""
    out = []
    for i in range(n):
        rec = Transition(i, f"PLC-{i % 7}/Trip", f"T{i}", "B1", T0, json.dumps({"state": "Trip", "i": i}), T0)
        out.append(
            encode(
                Entry(i, "transition", i, 1, rec),
                site="plant",
                gateway=gateway,
                replayed=False,
                store_id=STORE_ID,
            )
        )
    return out


def bodies(n: int, gateway: str, per_message: int) -> list[bytes]:
    """MQTT bodies: one CloudEvent each, or batches (JSON arrays) as the sink's batch_size makes them."""
    evs = events(n, gateway)
    if per_message == 1:
        return [e.body for e in evs]
    return [batch_body(evs[i : i + per_message]) for i in range(0, n, per_message)]


async def publish(
    port: int, messages: list[bytes], topic: str = "plant/events/x", pace_s: float = 0.0
) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"pub-{os.getpid()}-{time.monotonic_ns()}") as c:
        for body in messages:
            await c.publish(topic, body, qos=1)
            if pace_s:
                await asyncio.sleep(pace_s)



def config(tmp_path: Path, dsn: str, port: int, client_id: str = "ledger-1") -> Path:
    f = tmp_path / f"{client_id}.yaml"
    f.write_text(
        f"dsn: '{dsn}'\nmqtt: {{host: 127.0.0.1, port: {port}, topic: 'plant/events/#', group: ledger,"
        f" client_id: {client_id}}}\n"
    )
    return f


def start(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*CMD, "run", "-c", str(cfg)], stdout=subprocess.DEVNULL, stderr=log.open("ab"))


def subscribed(log: Path, times: int = 1) -> None:
    """Wait until the ledger logged its subscription `times` times (the first one creates the session)."""
    wait_for(
        lambda: log.exists() and log.read_text().count("mqtt intake subscribed") >= times,
        60,
        "the subscription",
    )


def counts(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM canonical_event), (SELECT count(*) FROM arrival)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def wait_for(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def probe() -> list[bytes]:
    rec = Transition(1, "PROBE/Ready", "T1", "B1", T0, "{}", T0)
    return [
        encode(
            Entry(1, "transition", 1, 1, rec),
            site="plant",
            gateway="probe",
            replayed=False,
            store_id=STORE_ID,
        ).body
    ]


def test_kill_9_during_a_burst_loses_nothing_and_makes_no_second_canonical(
    tmp_path: Path, broker: Broker, ledger_dsn: str
) -> None:
    n, kills = 1500, 3
    cfg = config(tmp_path, ledger_dsn, broker.port)
    log = tmp_path / "ledger.log"
    proc = start(cfg, log)
    subscribed(log)  # the first start creates the session: from now on the broker keeps our share
    asyncio.run(publish(broker.port, probe()))
    wait_for(lambda: counts(ledger_dsn)[1] >= 1, 60, "the probe in PostgreSQL")
    # One gateway sends one event per message, the other batches of 5 (both sink settings).
    a, b = bodies(n, "gw-a", 1), bodies(n, "gw-b", 5)
    msgs = [m for i, m in enumerate(a) for m in ([m, b[i // 5]] if i % 5 == 0 else [m])]
    done: list[bool] = []

    def burst() -> None:
        # Paced over several seconds, so that the kills land while messages are still coming.
        asyncio.run(publish(broker.port, msgs, pace_s=0.004))
        done.append(True)

    t = threading.Thread(target=burst, name="publisher")
    t.start()
    during = []
    for k in range(kills):
        subscribed(log, k + 1)
        time.sleep(0.4)
        during.append(counts(ledger_dsn)[1])
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = start(cfg, log)
    t.join(timeout=120)
    assert done, "the publisher finished"
    try:
        # Every event, and every gateway's delivery of it (the broker may still hold the second
        # gateway's copy for the restarted session when the last canonical is in): then SIGTERM.
        wait_for(
            lambda: counts(ledger_dsn)[0] >= n + 1 and counts(ledger_dsn)[1] >= 2 * n + 1,
            120,
            "every event and both gateways' deliveries in PostgreSQL",
        )
        subscribed(log, kills + 1)  # SIGTERM before the signal handler is set would just kill it
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert during[0] < 2 * n + 1, "the first kill came during the burst"
    with psycopg.connect(ledger_dsn) as conn:
        canon = conn.execute(
            "SELECT count(*), count(DISTINCT (source, transition_id, boot_id)) FROM canonical_event"
        ).fetchone()
        per = conn.execute(
            "SELECT min(g), max(g) FROM (SELECT count(DISTINCT a.gateway) AS g FROM canonical_event c"
            " JOIN arrival a ON a.canonical_id = c.id WHERE c.first_gateway <> 'probe' GROUP BY c.id) x"
        ).fetchone()
        arrivals = conn.execute("SELECT count(*) FROM arrival WHERE gateway <> 'probe'").fetchone()
    assert canon == (n + 1, n + 1), "one canonical per event, none lost, none twice"
    assert per == (2, 2), "every event has its arrivals from both gateways"
    assert arrivals is not None and arrivals[0] >= 2 * n
    print(
        f"kill -9 figures: kills={kills} events_sent={2 * n} (keys {n}) arrivals_at_kills={during}"
        f" canonical={canon[0] - 1} arrivals={arrivals[0]} lost=0 duplicate_canonicals=0"
    )


def test_postgresql_stopped_under_load_holds_acknowledgements_and_loses_nothing(
    tmp_path: Path, broker: Broker, pg_cluster: Any
) -> None:
    """A cluster of its own, stopped and started while messages arrive: MQTT waits at the broker,
    HTTP answers 503 with Retry-After, and after the restart everything is in, once."""
    import pgcluster

    own = pgcluster.create(pg_cluster.bindir, durable=False)
    try:
        dsn = own.dsn()
        http_port = pgcluster.free_port()
        cfg = tmp_path / "ledger.yaml"
        cfg.write_text(
            f"dsn: '{dsn}'\nhttp: {{listen: '127.0.0.1:{http_port}'}}\n"
            f"mqtt: {{host: 127.0.0.1, port: {broker.port}, topic: 'plant/events/#', group: ledger, client_id: ledger-pg}}\n"
        )
        log = tmp_path / "ledger.log"
        proc = start(cfg, log)
        try:
            subscribed(log)
            n = 600
            msgs = bodies(n, "gw-a", 1)
            asyncio.run(publish(broker.port, msgs[:200]))
            wait_for(lambda: counts(dsn)[1] >= 200, 60, "the first 200 committed")
            own.stop("fast")
            asyncio.run(publish(broker.port, msgs[200:]))  # the broker takes them (PUBACK to us)
            status, retry = http_post(http_port, probe()[0])
            assert status == 503 and retry is not None and int(retry) >= 1
            time.sleep(1.5)
            own.start()
            wait_for(lambda: counts(dsn)[0] >= n, 120, "every event after PostgreSQL came back")
            assert http_post(http_port, probe()[0])[0] == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        assert proc.returncode == 0, log.read_text()[-2000:]
        assert counts(dsn)[0] == n + 1, "no event lost, none twice (plus the HTTP probe)"
        assert "intake stops acknowledging" in log.read_text()
        assert "reachable again" in log.read_text()
    finally:
        own.destroy()


def http_post(port: int, body: bytes) -> tuple[int, str | None]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/", data=body, headers={"Content-Type": "application/cloudevents+json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Retry-After")


async def test_two_instances_on_one_shared_subscription_split_the_stream_without_overlap(
    broker: Broker, ledger_dsn: str
) -> None:
    from agent.ledger.config import MqttIntake
    from agent.ledger.intake_mqtt import MqttSubscriber
    from agent.ledger.writer import Writer

    stop = asyncio.Event()
    subs = [
        MqttSubscriber(
            MqttIntake("127.0.0.1", broker.port, "plant/events/#", "ledger", f"ledger-{k}"),
            Writer(ledger_dsn),
        )
        for k in (1, 2)
    ]
    tasks = [asyncio.create_task(s.run(stop)) for s in subs]
    try:
        async with asyncio.timeout(60):
            while True:  # both subscribed: a probe each way is not needed, the broker reports them
                await asyncio.sleep(0.2)
                if all(s.connected for s in subs):
                    break
        n = 400
        await publish(broker.port, bodies(n, "gw-a", 1))
        async with asyncio.timeout(60):
            while sum(s.committed_messages for s in subs) < n:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for s in subs:
            await s.writer.close()
    shares = [s.committed_messages for s in subs]
    assert sum(shares) == n and all(share > 0 for share in shares), shares
    assert counts(ledger_dsn) == (n, n), "every message once: no overlap between the two instances"


def test_kill_9_of_one_of_two_instances_on_a_shared_subscription_loses_nothing(
    tmp_path: Path, broker: Broker, ledger_dsn: str
) -> None:
    """Two ledger processes split one stream; one is killed mid-burst. The survivor keeps
    committing its share while the other is gone, the restarted one (same client id) gets back
    what it had not acknowledged: every key once, every gateway's arrival kept."""
    n = 800
    cfgs = [config(tmp_path, ledger_dsn, broker.port, f"ledger-{k}") for k in (1, 2)]
    logs = [tmp_path / f"ledger-{k}.log" for k in (1, 2)]
    procs = [start(c, lg) for c, lg in zip(cfgs, logs, strict=True)]
    try:
        for lg in logs:
            subscribed(lg)  # both sessions exist: the broker keeps each member's share from now on
        asyncio.run(publish(broker.port, probe()))
        wait_for(lambda: counts(ledger_dsn)[1] >= 1, 60, "the probe in PostgreSQL")
        a, b = bodies(n, "gw-a", 1), bodies(n, "gw-b", 4)
        msgs = [m for i, m in enumerate(a) for m in ([m, b[i // 4]] if i % 4 == 0 else [m])]
        done: list[bool] = []

        def burst() -> None:
            asyncio.run(publish(broker.port, msgs, pace_s=0.004))
            done.append(True)

        t = threading.Thread(target=burst, name="publisher")
        t.start()
        time.sleep(1.0)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        at_kill = counts(ledger_dsn)[1]  # read after the kill: what follows is the survivor's
        t.join(timeout=120)
        assert done, "the publisher finished"
        wait_for(lambda: counts(ledger_dsn)[1] > at_kill, 60, "the survivor's commits")
        time.sleep(1.5)  # the survivor is done with its share
        while_away = counts(ledger_dsn)[1]
        procs[0] = start(cfgs[0], logs[0])  # same client id: its session and its share wait for it
        subscribed(logs[0], 2)
        # Every event, and every gateway's delivery of it (the broker may still hold the second
        # gateway's copy for the restarted session when the last canonical is in): then SIGTERM.
        wait_for(
            lambda: counts(ledger_dsn)[0] >= n + 1 and counts(ledger_dsn)[1] >= 2 * n + 1,
            120,
            "every event and both gateways' deliveries in PostgreSQL",
        )
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    assert [p.returncode for p in procs] == [0, 0], [lg.read_text()[-2000:] for lg in logs]
    sent = len(msgs)
    assert at_kill < 1 + 2 * n, "the kill came during the burst"
    assert while_away > at_kill, "the survivor kept committing while the other was gone"
    assert while_away < 1 + 2 * n, "the killed instance's share waited at the broker for it"
    with psycopg.connect(ledger_dsn) as conn:
        canon = conn.execute(
            "SELECT count(*), count(DISTINCT (source, transition_id, boot_id)) FROM canonical_event"
        ).fetchone()
        per = conn.execute(
            "SELECT min(g), max(g) FROM (SELECT count(DISTINCT a.gateway) AS g FROM canonical_event c"
            " JOIN arrival a ON a.canonical_id = c.id WHERE c.first_gateway <> 'probe' GROUP BY c.id) x"
        ).fetchone()
        arrivals = conn.execute("SELECT count(*) FROM arrival WHERE gateway <> 'probe'").fetchone()
    assert canon == (n + 1, n + 1), "one canonical per event, none lost, none twice"
    assert per == (2, 2), "every event has its arrivals from both gateways"
    assert arrivals is not None and arrivals[0] >= 2 * n
    print(
        f"shared-subscription kill -9 figures: instances=2 kills=1 messages={sent} events_sent={2 * n}"
        f" (keys {n}) arrivals_at_kill={at_kill} arrivals_before_restart={while_away}"
        f" canonical={canon[0] - 1} arrivals={arrivals[0]} lost=0 duplicate_canonicals=0"
    )


async def test_an_upgraded_ledger_drops_the_shared_subscription_its_session_kept(
    broker: Broker, ledger_dsn: str
) -> None:
    """A ledger without `group` subscribed `$share/ledger/<topic>` before receipts; its persistent
    session keeps that subscription over the upgrade. The new ledger subscribes plainly and drops the
    old one: each message reaches it once, not once per subscription."""
    from agent.ledger.config import MqttIntake
    from agent.ledger.intake_mqtt import MqttSubscriber
    from agent.ledger.writer import Writer

    async def session(
        group: str | None, until: Callable[[MqttSubscriber], bool], linger_s: float = 0.0
    ) -> MqttSubscriber:
        intake = MqttIntake("127.0.0.1", broker.port, "plant/events/#", group, "ledger-up")
        sub = MqttSubscriber(intake, Writer(ledger_dsn))
        stop = asyncio.Event()
        task = asyncio.create_task(sub.run(stop))
        try:
            async with asyncio.timeout(60):
                while not until(sub):
                    await asyncio.sleep(0.05)
            await asyncio.sleep(linger_s)  # a second copy of each message would have come by now
        finally:
            stop.set()
            await task
            await sub.writer.close()
        return sub

    await session("ledger", lambda s: s.connected)  # the old ledger: its session holds $share/ledger/...
    n = 50
    published = asyncio.Event()

    def ready(s: MqttSubscriber) -> bool:
        if s.connected and not published.is_set():
            published.set()
            asyncio.get_running_loop().create_task(publish(broker.port, bodies(n, "gw-a", 1)))
        return s.committed_messages >= n

    new = await session(None, ready, linger_s=1.5)
    assert new.committed_messages == n, "each message once"
    assert counts(ledger_dsn) == (n, n)

"""Notifications on a real PostgreSQL with a real webhook receiver: a row per matching rule in the
transaction of an inserted canonical, never for a duplicate or a conflict; two workers never
send one row; back off, dead, operator retry; kill -9 between the send and the mark."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg
from pgcluster import free_port
from webhook import Receiver

from agent.core.intake import parse_delivery
from agent.ledger import arbiter, notifications
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.notifier import Notifier

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
NOW = "2026-04-22T09:00:00.000Z"


def line(tid: int | str, **kw: Any) -> str:
    base = {
        "source": "PUMP-07/Trip",
        "transitionId": tid,
        "bootId": "B1",
        "payload": {"state": "Trip", "severity": "High"},
    }
    base.update(kw)
    return json.dumps(base)


async def record(conn: Conn, lines: list[str], rules: list[NotifyRule], start: int = 1) -> list[str]:
    # import lines are told apart by their line number (their arrival key): number them
    items = [
        Arrival(parse_delivery(t, arrival_at=NOW, receiver="t", line=n), "gw", "import")
        for n, t in enumerate(lines, start)
    ]
    return [oc.decision.value for oc in await arbiter.record(conn, items, rules=rules)]


async def rows(conn: Conn) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT canonical_id, kind, idempotency_key, state, attempts FROM notification ORDER BY id"
    )
    out = await cur.fetchall()
    await conn.commit()
    return out


async def test_a_rule_fires_for_an_inserted_event_only_never_for_a_duplicate_or_a_conflict(
    ledger_conn: Conn,
) -> None:
    rules = [
        NotifyRule("trip", "http://127.0.0.1:1/x", type="io.edgeagent.transition", source="*/Trip"),
        NotifyRule("high", "http://127.0.0.1:1/y", payload={"severity": "High"}),
        NotifyRule("other", "http://127.0.0.1:1/z", source="*/OverTemp"),
    ]
    decisions = await record(
        ledger_conn,
        [
            line(1),
            line(1),
            line(1, payload={"state": "Trip", "severity": "Low"}),
            line(2, payload={"severity": "Low"}),
        ],
        rules,
    )
    assert decisions == ["inserted", "duplicate", "conflict", "inserted"]
    assert await record(ledger_conn, [line(1)], rules, start=5) == ["duplicate"]
    got = await rows(ledger_conn)
    assert sorted((r[0], r[1]) for r in got) == [(1, "high"), (1, "trip"), (2, "trip")]
    want = hashlib.sha256(b"PUMP-07/Trip\nB1:1\ntrip").hexdigest()
    assert {r[2] for r in got if r[:2] == (1, "trip")} == {want}
    assert want == notifications.idempotency_key("PUMP-07/Trip", "B1:1", "trip")


async def test_sent_with_idempotency_key_and_attempt_headers(
    ledger_conn: Conn, ledger_dsn: str, receiver: Receiver
) -> None:
    await record(ledger_conn, [line(1)], [NotifyRule("trip", receiver.url)])
    worker = Notifier(ledger_dsn)
    import aiohttp

    async with aiohttp.ClientSession() as s:
        assert await worker.run_once(s) == 1
        assert await worker.run_once(s) == 0
    await worker.close()
    (req,) = receiver.got
    key = notifications.idempotency_key("PUMP-07/Trip", "B1:1", "trip")
    assert req["headers"]["Idempotency-Key"] == key and req["headers"]["Notification-Attempt"] == "1"
    assert req["body"]["event"]["id"] == "B1:1" and req["body"]["event"]["data"]["severity"] == "High"
    assert req["body"]["attempt"] == 1 and req["body"]["kind"] == "trip"
    assert [r[3:] for r in await rows(ledger_conn)] == [("sent", 1)]


async def two_workers_drain(dsn: str, receiver: Receiver, n: int) -> list[Notifier]:
    """Two notifiers (batches of 20) send until neither finds a row; every one of the `n` rows
    reached `receiver` once, none sent by both."""
    import aiohttp

    workers = [Notifier(dsn, batch=20), Notifier(dsn, batch=20)]

    async def drain(w: Notifier, s: aiohttp.ClientSession) -> None:
        while await w.run_once(s):
            pass

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(drain(w, s) for w in workers))
    for w in workers:
        await w.close()
    keys = [r["headers"]["Idempotency-Key"] for r in receiver.got]
    assert len(keys) == n and len(set(keys)) == n, "every row sent once, none by both workers"
    return workers


async def test_two_workers_never_send_one_row_at_once(
    ledger_conn: Conn, ledger_dsn: str, receiver: Receiver
) -> None:
    await record(ledger_conn, [line(n) for n in range(300)], [NotifyRule("trip", receiver.url)])
    workers = await two_workers_drain(ledger_dsn, receiver, 300)
    assert all(w.sent > 0 for w in workers), "both workers took a share"
    assert {r[3:] for r in await rows(ledger_conn)} == {("sent", 1)}


async def test_failures_back_off_then_dead_and_only_an_operator_retries(
    ledger_conn: Conn, ledger_dsn: str, receiver: Receiver
) -> None:
    await record(ledger_conn, [line(1)], [NotifyRule("trip", receiver.url, max_attempts=2)])
    receiver.status = 500
    # A backoff of 0.5 s: 0.05 s ran out between two claims on a busy machine (the second claim
    # found the row due again).
    worker = Notifier(ledger_dsn, backoff_initial_s=0.5, backoff_max_s=0.5, jitter=lambda: 0.0)
    import aiohttp

    async with aiohttp.ClientSession() as s:
        assert await worker.run_once(s) == 1
        assert await worker.run_once(s) == 0, "backing off: not due yet"
        await asyncio.sleep(0.6)
        assert await worker.run_once(s) == 1
        await asyncio.sleep(0.6)
        assert await worker.run_once(s) == 0, "dead rows are never claimed"
        listed = await notifications.listing(ledger_conn)
        assert listed[0]["state"] == "dead" and "HTTP 500" in listed[0]["last_error"]
        assert await notifications.retry_dead(ledger_conn, more_attempts=1) == 1
        receiver.status = 200
        assert await worker.run_once(s) == 1
    await worker.close()
    assert [r["headers"]["Notification-Attempt"] for r in receiver.got] == ["1", "2", "3"]
    assert len({r["headers"]["Idempotency-Key"] for r in receiver.got}) == 1
    assert [r[3:] for r in await rows(ledger_conn)] == [("sent", 3)]


async def test_kill_9_between_send_and_mark_resends_with_the_next_attempt_and_the_same_key(
    tmp_path: Path, ledger_dsn: str, receiver: Receiver
) -> None:
    http_port = free_port()
    cfg = tmp_path / "ledger.yaml"
    cfg.write_text(
        f"dsn: '{ledger_dsn}'\nhttp: {{listen: '127.0.0.1:{http_port}'}}\n"
        f"notify:\n  - {{kind: trip, url: '{receiver.url}', lease_s: 1, when: {{source: '*/Trip'}}}}\n"
    )
    procs: list[asyncio.subprocess.Process] = []

    async def start() -> None:
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent",
                "ledger",
                "run",
                "-c",
                str(cfg),
                stderr=asyncio.subprocess.DEVNULL,
            )
        )

    def kill_on_first(body: dict[str, Any]) -> None:
        if body["attempt"] == 1:
            os.kill(procs[-1].pid, signal.SIGKILL)  # the send happened; the mark never will

    receiver.on_request = kill_on_first
    await start()
    event = {
        "specversion": "1.0",
        "id": "B1:T1",
        "source": "site/P/Trip",
        "type": "io.edgeagent.transition",
        "bootid": "B1",
        "transitionid": "T1",
        "gateway": "gw",
        "data": {"state": "Trip"},
    }
    import aiohttp

    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.post(
                    f"http://127.0.0.1:{http_port}/",
                    json=event,
                    headers={"Content-Type": "application/cloudevents+json"},
                ) as resp:
                    assert resp.status == 200
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)
    async with asyncio.timeout(60):
        while not receiver.got:
            await asyncio.sleep(0.1)
        await procs[-1].wait()
    await start()
    try:
        async with asyncio.timeout(60):
            while len(receiver.got) < 2:
                await asyncio.sleep(0.1)
            conn = await psycopg.AsyncConnection.connect(ledger_dsn)
            while (await (await conn.execute("SELECT state FROM notification")).fetchone()) != ("sent",):
                await conn.rollback()
                await asyncio.sleep(0.1)
            await conn.close()
    finally:
        procs[-1].send_signal(signal.SIGTERM)
        await procs[-1].wait()
    first, second = receiver.got[:2]
    assert first["headers"]["Idempotency-Key"] == second["headers"]["Idempotency-Key"]
    assert (first["headers"]["Notification-Attempt"], second["headers"]["Notification-Attempt"]) == ("1", "2")
    assert procs[-1].returncode == 0


async def test_an_inserted_event_wakes_an_idle_notifier_at_once_by_listen_notify(
    ledger_conn: Conn, ledger_dsn: str, receiver: Receiver
) -> None:
    worker = Notifier(ledger_dsn, poll_s=60.0)  # without NOTIFY it would wait a minute
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.sleep(1.0)  # idle, listening
        await record(ledger_conn, [line(1)], [NotifyRule("trip", receiver.url)])
        async with asyncio.timeout(20):
            while not receiver.got:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    assert receiver.got[0]["headers"]["Notification-Attempt"] == "1"

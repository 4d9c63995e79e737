"""Ledger MQTT intake benchmark: messages/s drained from a queued session, vs a bare subscriber.

Prints ONE JSON line. Our own Mosquitto (persistence, no queue limit) and our own PostgreSQL
cluster (fsync on). For each variant the sessions are created first, then N transitions (one
CloudEvent per message, as the gateway's MQTT sink sends them by default) are published at QoS 1
and queued at the broker; the clock runs from the subscriber's start until every message is
committed (and acknowledged). Alternated over rounds, medians; a fresh database per run.

* `bare`: one aiomqtt subscriber with the same session settings and manual PUBACK, gathering
  the same batches the same way, committing each with the bare set-based SQL of bench/ledger.py
  (COPY into a stage table, `INSERT ... ON CONFLICT DO NOTHING` of canonical rows and arrivals);
* `ledger`: the ledger's `MqttSubscriber` (parse, the core's decision, arrivals with evidence);
* `ledger_x2`: two ledger instances (two client ids) on one shared subscription.

    python bench/ledger_mqtt.py            # 20,000 messages, 3 rounds
    python bench/ledger_mqtt.py --quick    # a few hundred, for a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))
sys.path.insert(0, str(ROOT / "bench"))

import aiomqtt  # noqa: E402
import pgcluster  # noqa: E402
import psycopg  # noqa: E402
from ledger import BARE_ARRIVALS, BARE_CANONICAL, STAGE, fresh_db, make_template  # noqa: E402
from mosquitto import MOSQUITTO, Broker  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from agent.core.contract import payload_hash  # noqa: E402
from agent.core.records import Entry, Transition  # noqa: E402
from agent.ledger.config import MqttIntake  # noqa: E402
from agent.ledger.intake_mqtt import GATHER_S, MqttSubscriber  # noqa: E402
from agent.ledger.writer import Writer  # noqa: E402
from agent.sinks.encode import encode  # noqa: E402

STORE_ID = "00000000-0000-4000-8000-000000000000"  # the store id a gateway puts in identity-incomplete ids

T0 = "2026-04-22T08:00:12.120Z"
PAD = "x" * 400
TOPIC = "plant/events/PUMP/Trip"
GROUP = "ledger"


def bodies(n: int, tag: str) -> list[bytes]:
    out = []
    for i in range(n):
        payload = json.dumps({"state": "Trip", "pad": PAD}, separators=(",", ":"))
        rec = Transition(i, f"PUMP-{i % 200:03d}/Trip", f"{tag}{i}", "B17", T0, payload, T0)
        out.append(
            encode(
                Entry(i, "transition", i, 1, rec),
                site="plant",
                gateway="gw-a",
                replayed=False,
                store_id=STORE_ID,
            ).body
        )
    return out


def client(port: int, ident: str) -> aiomqtt.Client:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 86400
    props.ReceiveMaximum = 1000
    c = aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=ident,
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=False,
        properties=props,
    )
    c._client.manual_ack_set(True)
    return c


async def make_sessions(port: int, idents: list[str]) -> None:
    for ident in idents:
        async with client(port, ident) as c:
            await c.subscribe(f"$share/{GROUP}/plant/events/#", qos=1)


async def publish(port: int, msgs: list[bytes]) -> None:
    quiet = logging.getLogger("bench.publisher")
    quiet.setLevel(logging.ERROR)  # aiomqtt warns about every publish beyond 10 in flight
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=f"pub-{uuid.uuid4().hex[:8]}", max_inflight_messages=200, logger=quiet
    ) as c:
        for start in range(0, len(msgs), 200):  # a window: each publish waits for its PUBACK
            await asyncio.gather(*(c.publish(TOPIC, m, qos=1) for m in msgs[start : start + 200]))


def bare_rows(payloads: list[bytes]) -> list[tuple[Any, ...]]:
    rows = []
    for i, body in enumerate(payloads):
        ev = json.loads(body)
        data = ev["data"]
        ph = payload_hash(data, ev.get("time"))
        rows.append(
            (
                i,
                ev["source"],
                ev["transitionid"],
                ev["bootid"],
                ev["gateway"],
                ev.get("arrivalat"),
                ph,
                json.dumps(data, separators=(",", ":")),
                body,
            )
        )
    return rows


async def bare(port: int, dsn: str, n: int, ident: str) -> None:
    done = 0
    loop = asyncio.get_running_loop()
    async with await psycopg.AsyncConnection.connect(dsn) as conn, client(port, ident) as c:
        await c.subscribe(f"$share/{GROUP}/plant/events/#", qos=1)
        it = c.messages.__aiter__()
        while done < n:
            batch = [await it.__anext__()]
            deadline = loop.time() + GATHER_S
            while len(batch) < 1000:
                if len(c.messages):
                    batch.append(await it.__anext__())
                elif loop.time() >= deadline:
                    break
                else:
                    await asyncio.sleep(0.002)
            rows = bare_rows([bytes(m.payload) for m in batch])
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(STAGE)
                async with cur.copy(
                    "COPY stage (seq, source, transition_id, boot_id, gateway, arrived_at, payload_hash, payload,"
                    " raw) FROM STDIN"
                ) as cp:
                    for r in rows:
                        await cp.write_row(r)
                await cur.execute(BARE_CANONICAL)
                await cur.execute(BARE_ARRIVALS)
            for m in batch:
                c._client.ack(m.mid, m.qos)
            done += len(batch)


async def ledger(port: int, dsn: str, n: int, idents: list[str]) -> None:
    stop = asyncio.Event()
    subs = [
        MqttSubscriber(MqttIntake("127.0.0.1", port, "plant/events/#", GROUP, ident), Writer(dsn))
        for ident in idents
    ]
    tasks = [asyncio.create_task(s.run(stop)) for s in subs]
    while sum(s.committed_messages for s in subs) < n:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.gather(*tasks)
    for s in subs:
        await s.writer.close()


async def one_run(broker: Broker, cluster: pgcluster.Cluster, variant: str, n: int) -> float:
    dsn = fresh_db(cluster)
    tag = uuid.uuid4().hex[:6]
    idents = [f"{variant}-{tag}-{k}" for k in range(2 if variant == "ledger_x2" else 1)]
    await make_sessions(broker.port, idents)
    await publish(broker.port, bodies(n, tag))
    t0 = time.perf_counter()
    if variant == "bare":
        await bare(broker.port, dsn, n, idents[0])
    else:
        await ledger(broker.port, dsn, n, idents)
    elapsed = time.perf_counter() - t0
    with psycopg.connect(dsn) as conn:
        table = "b_canonical" if variant == "bare" else "canonical_event"
        got = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert got is not None and got[0] == n, (variant, got, n)
    # Drop the sessions, so the broker keeps no queue for them.
    for ident in idents:
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, identifier=ident, clean_start=True, protocol=aiomqtt.ProtocolVersion.V5
        ):
            pass
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.n or (400 if args.quick else 20_000)
    bindir = pgcluster.find_binaries()
    if bindir is None or MOSQUITTO is None:
        print("bench/ledger_mqtt.py: needs PostgreSQL server binaries and mosquitto", file=sys.stderr)
        sys.exit(2)
    work = Path(f"/tmp/edge-ledger-bench-{uuid.uuid4().hex[:8]}")
    work.mkdir()
    broker = Broker(work)
    cluster = pgcluster.create(bindir, durable=True)
    try:
        asyncio.run(make_template(cluster))
        names = ["bare", "ledger", "ledger_x2"]
        rates: dict[str, list[float]] = {}
        for rnd in range(args.rounds):
            for name in names if rnd % 2 == 0 else names[::-1]:
                rates.setdefault(name, []).append(asyncio.run(one_run(broker, cluster, name, n)))
        out: dict[str, Any] = {"bench": "ledger_mqtt", "messages": n, "rounds": args.rounds}
        for name, values in rates.items():
            out[f"{name}_msgs_per_s"] = round(statistics.median(values))
        out["ledger_vs_bare"] = round(out["ledger_msgs_per_s"] / out["bare_msgs_per_s"], 3)
        out["two_vs_one"] = round(out["ledger_x2_msgs_per_s"] / out["ledger_msgs_per_s"], 3)
        out["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(json.dumps(out))
    finally:
        cluster.destroy()
        broker.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

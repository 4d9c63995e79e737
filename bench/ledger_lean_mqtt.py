"""A lean set-based arbiter as an MQTT subscriber, written apart from the ledger's code (its own process).

    python bench/ledger_lean_mqtt.py DSN PORT CLIENT_ID [TOPIC]    # until SIGTERM

The MQTT counterpart of bench/ledger_lean.py (its SQL: the same stage, `INSERT ... SELECT
DISTINCT ON ... ON CONFLICT DO NOTHING RETURNING`, winners read, arrivals COPYed into
`lean_arrival`), subscribed as the ledger's intake is: MQTT 5, `clean_start` off with a session
expiry, Receive Maximum 2,000 (two batches), a shared subscription at QoS 1, manual PUBACK sent only after the
batch's COMMIT. A batch is the first message and what else comes within 50 ms, up to 1,000
messages; one transaction per batch (fsync and synchronous commit are the server's, on).

Each message body is one structured CloudEvent (as the gateway's MQTT sink sends them). Per
event it does what a correct intake must: UTF-8, JSON without NaN, `specversion` 1.0, `id`,
`source` and `type` as text, the type a transition, ids as text (an integer as its decimal
text), `id` = `pct(bootid):pct(transitionid)`, `time` and `arrivalat` RFC 3339 to UTC
milliseconds, RFC 8785 of `data` and the SHA-256 of `data` and `time`. A body that fails is a
`rejected` arrival, an event without a complete key an `identity_incomplete` one. It keeps no
conflict table, no pending list, no arrival keys, no metrics: the least a set-based arbiter
writes to decide every delivery and keep every arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiomqtt
import psycopg
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.import_baseline import Refused, _dumps, _id, _jcs, _Line, _loads, normal_ts
from bench.ledger_lean import COPY_ARRIVALS, SCHEMA, WINNERS

BATCH = 1000
GATHER_S = 0.05
TRANSITION = "io.edgeagent.transition"

STAGE = (
    "CREATE TEMP TABLE stage (seq int, source text, transition_id text, boot_id text, source_ts timestamptz,"
    " payload text, payload_hash text, arrival_at timestamptz, gateway text) ON COMMIT DELETE ROWS"
)
COPY_STAGE = (
    "COPY stage (seq, source, transition_id, boot_id, source_ts, payload, payload_hash, arrival_at, gateway)"
    " FROM STDIN"
)
INSERT_CANONICAL = """
INSERT INTO lean_canonical (source, transition_id, boot_id, source_ts, payload, payload_hash,
                            inserted_arrival_at, first_gateway)
SELECT DISTINCT ON (source, transition_id, boot_id) source, transition_id, boot_id, source_ts, payload,
       payload_hash, arrival_at, gateway
FROM stage ORDER BY source, transition_id, boot_id, seq
ON CONFLICT (source, transition_id, boot_id) DO NOTHING
RETURNING source, transition_id, boot_id
"""

_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")


def _pct(text: str) -> str:
    return text if _PLAIN.fullmatch(text) else quote(text, safe="", encoding="utf-8")


def parse(raw: bytes, now: str) -> tuple[Any, ...]:
    """(key or None, source_ts, arrival_at, payload text, hash, gateway, raw, reason) of one body."""
    gateway = "unknown"
    try:
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise Refused("not UTF-8") from None
        _Line.floats = False
        try:
            ev = _loads(text)
        except ValueError as exc:
            raise Refused(f"not JSON: {exc}") from None
        if type(ev) is not dict:
            raise Refused("not a JSON object")
        if type(ev.get("gateway")) is str and ev["gateway"]:
            gateway = ev["gateway"]
        for name in ("specversion", "id", "source", "type"):
            if type(ev.get(name)) is not str or not ev[name]:
                raise Refused(f"not a CloudEvent: {name}")
        if ev["specversion"] != "1.0" or ev["type"] != TRANSITION or "data_base64" in ev:
            raise Refused("not a transition CloudEvent 1.0 with JSON data")
        attempt, replayed = ev.get("attempt"), ev.get("replayed")
        if attempt is not None and (type(attempt) is not int or attempt < 1):
            raise Refused("attempt must be a whole number >= 1")
        if replayed is not None and type(replayed) is not bool:
            raise Refused("replayed must be true or false")
        payload = ev.get("data", {})
        if type(payload) is not dict:
            raise Refused("data must be a JSON object")
        src, tid, boot = ev["source"], _id(ev, "transitionid"), _id(ev, "bootid")
        ts = normal_ts(ev.get("time"), "time")
        at = normal_ts(ev.get("arrivalat"), "arrivalat") or now
        slow = _Line.floats or not text.isascii() or "\\u" in text
        body = _jcs(payload) if slow else _dumps(payload)
        hashed = f'{{"payload":{body},"sourceTimestamp":{"null" if ts is None else chr(34) + ts + chr(34)}}}'
        try:
            h = hashlib.sha256(hashed.encode()).hexdigest()
            if "\\u" in text:
                "".join(x or "" for x in (src, tid, boot)).encode()
        except UnicodeEncodeError:
            raise Refused("holds a lone UTF-16 surrogate") from None
        if tid and boot and ev["id"] != f"{_pct(boot)}:{_pct(tid)}":
            raise Refused("id disagrees with bootid/transitionid")
    except Refused as exc:
        return (None, None, now, "", None, gateway, raw, str(exc))
    if tid and boot:
        return ((src, tid, boot), ts, at, body, h, gateway, raw, None)
    missing = "transitionid" if not tid else "bootid"
    return (None, ts, at, body, h, gateway, raw, f"missing {missing}; no identity is made up")


async def arbitrate(cur: psycopg.AsyncCursor[Any], bodies: list[bytes]) -> None:
    """One batch in the open transaction."""
    now_dt = datetime.now(UTC)
    now = now_dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now_dt.microsecond // 1000:03d}Z"
    parsed = [parse(raw, now) for raw in bodies]
    async with cur.copy(COPY_STAGE) as cp:
        for seq, p in enumerate(parsed):
            if p[0] is not None:
                await cp.write_row((seq, *p[0], p[1], p[3], p[4], p[2], p[5]))
    await cur.execute(INSERT_CANONICAL)
    fresh = {tuple(r) for r in await cur.fetchall()}
    await cur.execute(WINNERS)
    winners = {(r[0], r[1], r[2]): (r[3], r[4]) for r in await cur.fetchall()}
    async with cur.copy(COPY_ARRIVALS) as cp:
        for key, ts, at, _body, h, gateway, raw, reason in parsed:
            if key is None:
                decision = "rejected" if h is None else "identity_incomplete"
                await cp.write_row(
                    (decision, None, None, None, None, ts, h, reason, gateway, at, now, None, raw)
                )
                continue
            cid, won = winners[key]
            if key in fresh:
                fresh.discard(key)
                decision = "inserted"
            else:
                decision = "duplicate" if won == h else "conflict"
            await cp.write_row((decision, cid, *key, ts, h, None, gateway, at, now, None, raw))


def client(port: int, ident: str) -> aiomqtt.Client:
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 7 * 86400
    props.ReceiveMaximum = 2 * BATCH  # as the ledger: the next batch arrives while one commits
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


async def serve(dsn: str, port: int, ident: str, topic: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    settle = asyncio.Lock()  # held from a batch's first message to its last PUBACK
    async with await psycopg.AsyncConnection.connect(dsn) as conn, client(port, ident) as c:
        await conn.execute(SCHEMA)
        await conn.execute(STAGE)
        await conn.commit()
        await c.subscribe(topic, qos=1)

        async def consume() -> None:
            it = c.messages.__aiter__()
            while not stop.is_set():
                batch = [await it.__anext__()]
                async with settle:
                    deadline = loop.time() + GATHER_S
                    while len(batch) < BATCH:
                        if len(c.messages):
                            batch.append(await it.__anext__())
                        elif loop.time() >= deadline:
                            break
                        else:
                            await asyncio.sleep(0.002)
                    async with conn.transaction(), conn.cursor() as cur:
                        await arbitrate(cur, [bytes(m.payload) for m in batch])
                    for m in batch:
                        c._client.ack(m.mid, m.qos)

        reader = asyncio.create_task(consume())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not reader.done():
            async with settle:
                reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        stopper.cancel()


def main() -> None:
    dsn, port, ident = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    topic = sys.argv[4] if len(sys.argv) > 4 else "$share/ledger/plant/events/#"
    asyncio.run(serve(dsn, port, ident, topic))


if __name__ == "__main__":
    main()

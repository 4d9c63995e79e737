"""The gateway's status record over HTTP, end to end: the gateway's HttpSink posts what
`status_record.build` makes to the ledger's HTTP intake, which keeps it in `gateway_status` only;
a body that is not a status record is 400 and stores nothing; without the token, 401."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import psycopg

from agent.config.upstreams import HttpUpstream
from agent.ledger.config import HttpIntake
from agent.ledger.intake_http import HttpServer
from agent.ledger.status_intake import HTTP_TYPE, StatusStore
from agent.ledger.writer import Writer
from agent.service import status_record
from agent.sinks.http import HttpSink

TOKEN = "s3cret-token"
OUTBOX = [
    {
        "upstream": "ledger",
        "pending": 3,
        "rejected": 1,
        "oldest_pending_at": "2026-04-22T08:00:00.000Z",
        "awaiting_receipt": 2,
        "oldest_awaiting_at": "2026-04-22T08:00:30.000Z",
    },
    {"upstream": "historian", "pending": 0, "rejected": 0, "oldest_pending_at": None},
]
CONNS = [{"device": "PUMP-07", "receiver": "modbus:10.0.0.7:502", "state": "up", "ticks_missed": 4}]


def test_the_record_holds_backlog_age_room_and_links() -> None:
    rec = status_record.build(
        site="plant",
        gateway="gw-1",
        at="2026-04-22T08:01:00.000Z",
        now_s=1776844860.0,  # 2026-04-22T08:01:00Z
        outbox=OUTBOX,
        store_room=123,
        connections=CONNS,
    )
    assert rec["upstreams"] == {
        "ledger": {
            "backlog": 3,
            "dead_letters": 1,
            "oldest_pending_age_s": 60.0,
            "awaiting_receipt": 2,
            "oldest_awaiting_receipt_age_s": 30.0,
        },
        "historian": {
            "backlog": 0,
            "dead_letters": 0,
            "oldest_pending_age_s": None,
            "awaiting_receipt": 0,
            "oldest_awaiting_receipt_age_s": None,
        },
    }
    assert rec["store_room_bytes"] == 123 and rec["gateway"] == "gw-1"
    assert rec["devices"]["PUMP-07 modbus:10.0.0.7:502"]["ticks_missed"] == 4


async def test_http_status_records_go_to_gateway_status_and_never_to_the_events(
    tmp_path: Path, ledger_dsn: str
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    srv = HttpServer(HttpIntake("127.0.0.1", 0, str(tmp_path / "token")), Writer(ledger_dsn))
    srv.status_store = StatusStore(ledger_dsn)
    await srv.start()
    url = f"http://127.0.0.1:{srv.port}/events"
    sink = HttpSink(HttpUpstream(name="ledger", url=url, token_file=str(tmp_path / "token")))
    try:
        rec = status_record.build(
            site="plant",
            gateway="gw-h",
            at="2026-04-22T08:01:00.000Z",
            now_s=0.0,
            outbox=OUTBOX,
            store_room=5,
            connections=CONNS,
        )
        assert await status_record.publish([sink], "gw-h", rec) == 1
        async with aiohttp.ClientSession() as s:
            bad = await s.post(
                url,
                data=b'{"gateway": 7}',
                headers={"Content-Type": HTTP_TYPE, "Authorization": f"Bearer {TOKEN}"},
            )
            assert bad.status == 400
            anon = await s.post(url, data=json.dumps(rec).encode(), headers={"Content-Type": HTTP_TYPE})
            assert anon.status == 401
    finally:
        await sink.close()
        await srv.stop()
        await srv.status_store.close()
        await srv.writer.close()
    async with await psycopg.AsyncConnection.connect(ledger_dsn) as conn:
        rows = await (await conn.execute("SELECT gateway, via, status FROM gateway_status")).fetchall()
        arrivals = await (await conn.execute("SELECT count(*) FROM arrival")).fetchone()
    assert [(g, v) for g, v, _ in rows] == [("gw-h", "http")]
    assert rows[0][2]["upstreams"]["ledger"]["backlog"] == 3
    assert arrivals == (0,)

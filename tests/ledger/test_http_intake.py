"""HTTP intake against a real PostgreSQL: the gateway's own CloudEvents bodies (made by its
encoder), 2xx only after commit, and every bad input refused clearly with nothing else disturbed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from agent.core.records import BootObserved, Entry, Transition
from agent.ledger.config import HttpIntake
from agent.ledger.intake_http import HttpServer
from agent.ledger.writer import Writer
from agent.sinks.encode import BATCH_CONTENT_TYPE, EVENT_CONTENT_TYPE, encode

STORE_ID = "00000000-0000-4000-8000-000000000000"  # the store id a gateway puts in identity-incomplete ids

TOKEN = "s3cret-token"
T0 = "2026-04-22T08:00:12.120Z"


def transition(n: int, *, severity: str = "High", boot: str = "B17", gateway: str = "gw-a") -> bytes:
    rec = Transition(n, "PUMP-07/Trip", f"T{n}", boot, T0, json.dumps({"severity": severity}), T0)
    return encode(
        Entry(n, "transition", n, 1, rec),
        site="plant-1",
        gateway=gateway,
        replayed=False,
        store_id=STORE_ID,
    ).body


def boot(gateway: str) -> bytes:
    rec = BootObserved(1, "PUMP-07", "B17", "B16", T0, None, True, '{"summary":"seen"}')
    return encode(
        Entry(9, "boot_observed", 1, 1, rec),
        site="plant-1",
        gateway=gateway,
        replayed=False,
        store_id=STORE_ID,
    ).body


def batch(*bodies: bytes) -> bytes:
    return b"[" + b",".join(bodies) + b"]"


@pytest.fixture
async def server(tmp_path: Path, ledger_dsn: str) -> AsyncIterator[HttpServer]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    writer = Writer(ledger_dsn)
    srv = HttpServer(HttpIntake("127.0.0.1", 0, str(token), max_body=64 * 1024), writer)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()
        await writer.close()


async def post(
    srv: HttpServer, body: bytes, *, ctype: str = BATCH_CONTENT_TYPE, token: str | None = TOKEN
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": ctype}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{srv.port}/events", data=body, headers=headers) as r,
    ):
        return r.status, await r.json(content_type=None), dict(r.headers)


def counts(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM canonical_event), (SELECT count(*) FROM arrival)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_two_gateways_sending_one_event_make_one_canonical_with_two_arrivals(
    server: HttpServer, ledger_dsn: str
) -> None:
    status, body, _ = await post(server, batch(transition(1, gateway="gw-a"), boot("gw-a")))
    assert status == 200 and [r["decision"] for r in body["results"]] == ["inserted", "inserted"]
    status, body, _ = await post(server, batch(transition(1, gateway="gw-b"), boot("gw-b")))
    assert status == 200 and [r["decision"] for r in body["results"]] == ["duplicate", "duplicate"]
    with psycopg.connect(ledger_dsn) as conn:
        rows = conn.execute("SELECT gateway, via, decision, kind FROM arrival ORDER BY id").fetchall()
        boots = conn.execute("SELECT device, boot_id, previous_boot_id FROM boot").fetchall()
        key = conn.execute("SELECT source, transition_id, boot_id FROM canonical_event").fetchall()
    assert [r[:3] for r in rows] == [
        ("gw-a", "http", "inserted"),
        ("gw-a", "http", "inserted"),
        ("gw-b", "http", "duplicate"),
        ("gw-b", "http", "duplicate"),
    ]
    assert boots == [("plant-1/PUMP-07", "B17", "B16")], "one BootObserved; the first one's evidence stands"
    assert key == [("plant-1/PUMP-07/Trip", "T1", "B17")]


async def test_a_single_event_and_a_conflict(server: HttpServer) -> None:
    assert (await post(server, transition(2), ctype=EVENT_CONTENT_TYPE))[0] == 200
    status, body, _ = await post(server, transition(2, severity="Low"), ctype=EVENT_CONTENT_TYPE)
    assert status == 200 and body["results"][0]["decision"] == "conflict"


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        pytest.param(
            {"specversion": "1.0", "source": "s", "type": "io.edgeagent.transition"}, "`id`", id="no id"
        ),
        pytest.param([1, 2], "JSON object", id="not an object"),
        pytest.param(
            {"id": "x", "source": "s", "type": "t", "specversion": "0.3"}, "specversion", id="old spec"
        ),
        pytest.param(
            {"id": "x", "source": "s", "type": "com.example", "specversion": "1.0"},
            "unknown event type",
            id="foreign type",
        ),
    ],
)
async def test_an_event_that_is_not_ours_is_a_rejected_arrival_and_the_rest_goes_on(
    server: HttpServer, ledger_dsn: str, event: Any, reason: str
) -> None:
    status, body, _ = await post(server, batch(json.dumps(event).encode(), transition(3)))
    assert status == 200
    first, second = body["results"]
    assert first["decision"] == "rejected" and reason in first["reason"]
    assert second["decision"] == "inserted"
    assert counts(ledger_dsn) == (1, 2)


async def test_an_id_that_disagrees_with_its_extensions_is_rejected_never_merged(
    server: HttpServer, ledger_dsn: str
) -> None:
    ev = json.loads(transition(4))
    ev["id"] = "B17:T5"
    status, body, _ = await post(server, batch(json.dumps(ev).encode()))
    assert status == 200 and body["results"][0]["decision"] == "rejected"
    assert "disagrees" in body["results"][0]["reason"]
    assert counts(ledger_dsn) == (0, 1)


@pytest.mark.parametrize(
    ("body", "ctype", "token", "status"),
    [
        pytest.param(b"{not json", BATCH_CONTENT_TYPE, TOKEN, 400, id="not JSON is 400"),
        pytest.param(b'{"a": 1}', BATCH_CONTENT_TYPE, TOKEN, 400, id="a batch that is not an array is 400"),
        pytest.param(b"\xff\xfe", EVENT_CONTENT_TYPE, TOKEN, 400, id="not UTF-8 is 400"),
        pytest.param(b"[]", "text/plain", TOKEN, 415, id="another content type is 415"),
        pytest.param(
            b"[" + b" " * 70_000 + b"]", BATCH_CONTENT_TYPE, TOKEN, 413, id="over the size limit is 413"
        ),
        pytest.param(b"[]", BATCH_CONTENT_TYPE, None, 401, id="no token is 401"),
        pytest.param(b"[]", BATCH_CONTENT_TYPE, "wrong", 401, id="a wrong token is 401"),
    ],
)
async def test_bad_requests_are_refused_and_store_nothing(
    server: HttpServer, ledger_dsn: str, body: bytes, ctype: str, token: str | None, status: int
) -> None:
    got, answer, headers = await post(
        server, batch(transition(5)) if status == 401 else body, ctype=ctype, token=token
    )
    assert got == status and answer["error"]
    if status == 401:
        assert headers["WWW-Authenticate"] == "Bearer"
    assert counts(ledger_dsn) == (0, 0)
    assert (await post(server, batch(transition(6))))[0] == 200, "the intake goes on"


async def test_without_postgresql_the_answer_is_503_with_retry_after_and_nothing_is_acknowledged(
    tmp_path: Path,
) -> None:
    from pgcluster import free_port

    writer = Writer(f"host=127.0.0.1 port={free_port()} user=x dbname=x connect_timeout=2")
    srv = HttpServer(HttpIntake("127.0.0.1", 0, None), writer)
    await srv.start()
    try:
        status, body, headers = await post(srv, batch(transition(7)), token=None)
        assert status == 503 and int(headers["Retry-After"]) >= 1 and "cannot connect" in body["error"]
        status, _, headers = await post(srv, batch(transition(7)), token=None)
        assert status == 503 and "Retry-After" in headers
    finally:
        await srv.stop()
        await writer.close()

"""Bidirectional and other control characters on the review page (issue 36): shown as escapes, as the
command line shows them, never raw (`Pumpe U+202E evil U+202C` would read "Pumpe live")."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from agent.ledger import gateway_status
from agent.ledger.connection import connect
from agent.ledger.web.app import make_app
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard

NAME = "Pumpe \u202eevil\u202c\x1b[31m"


async def overview_of(dsn: str, status: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Keep `status` in gateway_status, then the overview page as HTML and as its JSON export."""
    conn = await connect(dsn)
    try:
        assert await gateway_status.record(conn, status, "mqtt")
    finally:
        await conn.close()
    client = TestClient(TestServer(make_app(Pool(dsn, size=1), Guard(None), silent_after=300)))
    await client.start_server()
    try:
        page = await (await client.get("/")).text()
        (doc,) = await (await client.get("/?format=json")).json()
    finally:
        await client.close()
    return page, doc


async def test_a_gateway_name_with_bidi_controls_is_shown_escaped(ledger_dsn: str) -> None:
    status = {"site": NAME, "gateway": NAME, "at": "2026-12-06T02:00:00.000Z", "upstreams": {}, "devices": {}}
    page, doc = await overview_of(ledger_dsn, status)
    assert "\u202e" not in page and "\u202c" not in page and "\x1b" not in page
    assert "Pumpe \\u202eevil\\u202c\\x1b[31m" in page
    assert NAME in {g["gateway"] for g in doc["fleet"]}, "the JSON export stays exact"


async def test_a_status_from_the_future_is_heard_now_and_its_clock_flagged(ledger_dsn: str) -> None:
    """Issue 36: a record stamped an hour ahead is clamped to when the ledger received it (never
    heard in the future, which would keep a dead gateway 'alive' for an hour) and flagged."""
    from datetime import UTC, datetime, timedelta

    from agent.core.timestamps import format_timestamp

    ahead = format_timestamp(datetime.now(UTC) + timedelta(hours=1))
    page, doc = await overview_of(ledger_dsn, {"site": "plant-1", "gateway": "gw-fast", "at": ahead})
    (gw,) = [g for g in doc["fleet"] if g["gateway"] == "gw-fast"]
    assert 3500 < gw["clock_ahead_s"] < 3700
    assert 0 <= gw["silent_s"] < 60, "heard when received, not an hour from now"
    assert "s ahead)" in page

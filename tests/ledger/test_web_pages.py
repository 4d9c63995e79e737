"""The review page in-process (aiohttp's test client) against a real PostgreSQL filled with the seed's
cases: each page and its filters, the exports, the escaping, the headers, and the two writes with
everything a write needs (session, CSRF token, same origin) and nothing written without it."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import webfill
from aiohttp.test_utils import TestClient, TestServer

from agent.ledger.connection import connect
from agent.ledger.web.app import make_app
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard

TOKEN = "s3cret-token"
PAGES = [
    "/",
    "/events",
    "/events/1",
    "/conflicts",
    "/pending",
    "/timeline",
    "/timeline?device=PUMP-07",
    "/notifications",
]


@pytest.fixture
async def filled(ledger_dsn: str, tmp_path: Path) -> str:
    conn = await connect(ledger_dsn)
    try:
        await webfill.fill(conn, tmp_path)
    finally:
        await conn.close()
    return ledger_dsn


async def _client(dsn: str, guard: Guard) -> TestClient:  # type: ignore[type-arg]
    client = TestClient(TestServer(make_app(Pool(dsn, size=2), guard, silent_after=300)))
    await client.start_server()
    return client


@pytest.fixture
async def client(filled: str) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    c = await _client(filled, Guard(TOKEN))
    try:
        yield c
    finally:
        await c.close()


def origin(client: TestClient) -> str:  # type: ignore[type-arg]
    return f"http://{client.host}:{client.port}"


async def rows_of(client: TestClient, path: str) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    sep = "&" if "?" in path else "?"
    resp = await client.get(path + sep + "format=json&limit=1000")
    assert resp.status == 200, await resp.text()
    data: list[dict[str, Any]] = await resp.json()
    return data


async def signed_in(client: TestClient) -> str:  # type: ignore[type-arg]
    """Sign in; returns the CSRF token of a page's mark form."""
    resp = await client.post(
        "/login",
        data={"token": TOKEN, "next": "/conflicts"},
        headers={"Origin": origin(client)},
        allow_redirects=False,
    )
    assert resp.status == 303
    page = await (await client.get("/conflicts")).text()
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m, "a signed-in page carries the CSRF token in its forms"
    return m.group(1)


async def marks(dsn: str) -> list[tuple[Any, ...]]:
    conn = await connect(dsn)
    try:
        cur = await conn.execute("SELECT arrival_id, note, marked_by FROM review_mark ORDER BY id")
        return list(await cur.fetchall())
    finally:
        await conn.close()


async def test_every_page_answers_with_the_security_headers_and_no_script(client: TestClient) -> None:  # type: ignore[type-arg]
    for path in PAGES:
        resp = await client.get(path)
        assert resp.status == 200, path
        csp = resp.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp and "script-src" not in csp
        assert "default-src 'none'" in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        text = await resp.text()
        assert "<script" not in text.lower(), path  # not ours, not a PLC's
    bad = await client.get("/events?before=x")
    assert bad.status == 400 and bad.headers["X-Content-Type-Options"] == "nosniff"


async def test_a_plc_string_holding_markup_is_shown_as_text(client: TestClient) -> None:  # type: ignore[type-arg]
    for path in ["/events/9", "/conflicts", "/notifications?state=dead", "/timeline?device=PUMP-07"]:
        text = await (await client.get(path)).text()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, path
        assert webfill.SCRIPT not in text, path


@pytest.mark.parametrize(
    ("path", "field", "want"),
    [
        ("/events?source=PUMP-07/Trip", "source", {"PUMP-07/Trip"}),
        ("/events?gateway=gw-2", "source", {"PUMP-09/Trip"}),
        ("/events?transition=T22", "transition_id", {"T22"}),
        ("/events?boot=B3", "source", {"VALVE-01/Open"}),
        ("/events?since=2026-04-22T13:00:00Z&until=2026-04-22T14:00:00Z", "transition_id", {"T30", "T31"}),
        ("/conflicts?state=open", "source", {"PUMP-08/Trip", "PUMP-09/Trip"}),
        ("/conflicts?gateway=gw-2", "source", {"PUMP-09/Trip"}),
        ("/conflicts?source=PUMP-08/Trip", "canonical_hash", None),
        ("/pending?state=open", "transition_id", {"T22"}),
        ("/notifications?state=dead", "state", {"dead"}),
        ("/notifications?state=sent", "state", {"sent"}),
        ("/timeline?device=PUMP-07", "what", {"boot", "gap"}),
    ],
)
async def test_each_page_filters_in_its_query_string(
    client: TestClient, path: str, field: str, want: set[str] | None
) -> None:  # type: ignore[type-arg]
    rows = await rows_of(client, path)
    assert rows
    if want is not None:
        assert {r[field] for r in rows} == want


async def test_filters_narrow_and_paging_walks_every_event_once(client: TestClient) -> None:  # type: ignore[type-arg]
    every = await rows_of(client, "/events")
    assert len(every) == 9  # the seed's 8 canonical events and the hostile one
    seen: list[int] = []
    path = "/events?limit=2"
    while path:
        page = await (await client.get(path)).text()
        seen += [int(x) for x in re.findall(r'<a href="/events/(\d+)">', page)]
        m = re.search(r'<a href="(/events\?[^"]*before=\d+[^"]*)">older events', page)
        path = m.group(1).replace("&amp;", "&") if m else ""
    assert sorted(seen) == sorted(e["id"] for e in every)
    assert (await client.get("/events?since=yesterday")).status == 400
    assert (await client.get("/conflicts?state=closed")).status == 400
    assert (await client.get("/events/999999")).status == 404


async def test_exports_hold_the_pages_rows_as_csv_and_json(client: TestClient) -> None:  # type: ignore[type-arg]
    for path in [
        "/",
        "/events",
        "/events/9",
        "/conflicts",
        "/pending",
        "/timeline?device=PUMP-07",
        "/notifications",
    ]:
        sep = "&" if "?" in path else "?"
        as_csv = await client.get(path + sep + "format=csv")
        assert as_csv.status == 200 and as_csv.content_type == "text/csv", path
        assert "attachment" in as_csv.headers["Content-Disposition"]
        table = list(csv.DictReader(io.StringIO(await as_csv.text())))
        as_json = await (await client.get(path + sep + "format=json")).json()
        if path in ("/", "/events/9"):
            continue  # the JSON is one object (summary and fleet, or the event with its parts)
        assert len(table) == len(as_json), path
    conflicts = await rows_of(client, "/conflicts")
    assert {json.loads(c["conflicting_payload"])["severity"] for c in conflicts} == {"Low"}


async def test_overview_shows_the_fleet_and_marks_the_silent_gateway(client: TestClient) -> None:  # type: ignore[type-arg]
    doc = (await rows_of(client, "/"))[0]
    fleet = {(g["site"], g["gateway"]): g for g in doc["fleet"]}
    # The status records name their site; the imported arrivals do not (site None: not known).
    assert set(fleet) == {
        ("plant-1", "gw-1"),
        ("plant-1", "gw-2"),
        (None, "gw-1"),
        (None, "gw-2"),
        (None, "import"),
    }
    assert fleet["plant-1", "gw-1"]["silent"] is False and fleet["plant-1", "gw-1"]["upstreams"] == [
        "mqtt: 12 waiting, oldest 40 s"
    ]
    assert fleet["plant-1", "gw-2"]["silent"] is True and fleet[None, "gw-2"]["silent"] is True
    assert doc["summary"]["conflicts_open"] == 2 and doc["summary"]["pending_open"] == 1
    text = await (await client.get("/")).text()
    assert re.search(r"<td>plant-1</td><td><a [^>]*>gw-2</a></td><td><span class=\"silent\">SILENT", text)


async def test_a_status_record_updates_the_overview_and_never_enters_the_event_tables(
    filled: str, client: TestClient
) -> None:  # type: ignore[type-arg]
    from agent.ledger import gateway_status

    conn = await connect(filled)
    try:
        before = await webfill.dump(conn)
        rec = gateway_status.parse(
            json.dumps(
                {
                    "site": "plant-1",
                    "gateway": "gw-3",
                    "at": "2031-01-01T00:00:00Z",
                    "upstreams": {"http": {"backlog": 0, "oldest_pending_age_s": None}},
                }
            ).encode()
        )
        assert await gateway_status.record(conn, rec, "http")
        assert not await gateway_status.record(
            conn, {**rec, "at": "2030-01-01T00:00:00Z"}, "http"
        )  # older: kept out
        after = await webfill.dump(conn)
    finally:
        await conn.close()
    changed = [line for line in set(before.splitlines()) ^ set(after.splitlines())]
    assert changed and all("gw-3" in line for line in changed)  # only gateway_status's new row
    fleet = {(g["site"], g["gateway"]): g for g in (await rows_of(client, "/"))[0]["fleet"]}
    assert fleet["plant-1", "gw-3"]["silent"] is False
    assert fleet["plant-1", "gw-3"]["upstreams"] == ["http: 0 waiting"]
    with pytest.raises(gateway_status.BadStatus):
        gateway_status.parse(b'{"site": "plant-1", "gateway": "", "at": "2030-01-01T00:00:00Z"}')
    with pytest.raises(gateway_status.BadStatus, match="site"):
        gateway_status.parse(b'{"gateway": "gw-3", "at": "2030-01-01T00:00:00Z"}')


async def test_a_signed_in_same_origin_mark_is_appended_and_listed(filled: str, client: TestClient) -> None:  # type: ignore[type-arg]
    csrf = await signed_in(client)
    conflict = (await rows_of(client, "/conflicts?source=PUMP-08/Trip"))[0]["arrival_id"]
    form = {
        "csrf": csrf,
        "note": "severity re-sent by firmware; canonical kept",
        "by": "ana",
        "next": "/conflicts",
    }
    resp = await client.post(
        f"/arrivals/{conflict}/mark", data=form, headers={"Origin": origin(client)}, allow_redirects=False
    )
    assert resp.status == 303 and resp.headers["Location"] == f"/conflicts#a{conflict}"
    assert await marks(filled) == [(conflict, form["note"], "ana")]
    assert [c["source"] for c in await rows_of(client, "/conflicts?state=reviewed")] == ["PUMP-08/Trip"]
    assert "severity re-sent by firmware" in await (await client.get("/conflicts?state=reviewed")).text()
    # a pending arrival takes a mark too; a plain duplicate does not (404), an empty note neither (400)
    assert (
        await client.post(
            "/arrivals/8/mark",
            data={**form, "note": "no boot id: waits"},
            headers={"Origin": origin(client)},
            allow_redirects=False,
        )
    ).status == 303
    assert (
        await client.post("/arrivals/2/mark", data=form, headers={"Origin": origin(client)})
    ).status == 404
    assert (
        await client.post(
            f"/arrivals/{conflict}/mark", data={**form, "note": "  "}, headers={"Origin": origin(client)}
        )
    ).status == 400
    assert len(await marks(filled)) == 2


@pytest.mark.parametrize(
    "case", ["no-session", "no-csrf", "wrong-csrf", "other-origin", "no-origin", "null-origin"]
)
async def test_a_write_without_everything_it_needs_is_403_and_writes_nothing(
    filled: str, client: TestClient, case: str
) -> None:  # type: ignore[type-arg]
    csrf = await signed_in(client)
    headers = {"Origin": origin(client)}
    form = {"csrf": csrf, "note": "should not be kept", "by": "mallory"}
    if case == "no-session":
        client.session.cookie_jar.clear()
    elif case == "no-csrf":
        del form["csrf"]
    elif case == "wrong-csrf":
        form["csrf"] = "0" * 64
    elif case == "other-origin":
        headers = {"Origin": "http://evil.example"}
    elif case == "no-origin":
        headers = {}
    elif case == "null-origin":
        headers = {"Origin": "null"}
    for target in ("/arrivals/8/mark", "/notifications/1/retry"):
        resp = await client.post(target, data=form, headers=headers, allow_redirects=False)
        assert resp.status == 403, (case, target)
    assert await marks(filled) == []
    assert [n["state"] for n in await rows_of(client, "/notifications?state=dead")] == ["dead"]


async def test_wrong_token_and_read_only_page_refuse_every_write(filled: str) -> None:
    for guard in (Guard(TOKEN), Guard(None)):
        c = await _client(filled, guard)
        try:
            resp = await c.post(
                "/login", data={"token": "wrong"}, headers={"Origin": origin(c)}, allow_redirects=False
            )
            assert resp.status == 403
            assert "edge_ledger_session" not in {k.key for k in c.session.cookie_jar}
            assert (
                await c.post("/arrivals/8/mark", data={"note": "x", "by": "y"}, headers={"Origin": origin(c)})
            ).status == 403
            if not guard.writable:
                assert "Read-only" in await (await c.get("/pending")).text()
        finally:
            await c.close()
    assert await marks(filled) == []


async def test_retry_makes_a_dead_notification_pending_through_the_commands_code(
    filled: str, client: TestClient
) -> None:  # type: ignore[type-arg]
    csrf = await signed_in(client)
    page = await (await client.get("/notifications?state=dead")).text()
    assert 'action="/notifications/1/retry"' in page
    resp = await client.post(
        "/notifications/1/retry",
        data={"csrf": csrf, "next": "/notifications"},
        headers={"Origin": origin(client)},
        allow_redirects=False,
    )
    assert resp.status == 303
    row = await rows_of(client, "/notifications?kind=trip-webhook")
    assert {r["id"]: r["state"] for r in row}[1] == "pending"
    assert {r["id"]: r["max_attempts"] for r in row}[1] == 3 + 5
    again = await client.post(
        "/notifications/1/retry", data={"csrf": csrf}, headers={"Origin": origin(client)}
    )
    assert again.status == 409


def test_ledger_review_mark_command_appends_the_same_mark(filled: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "agent",
        "ledger",
        "--dsn",
        filled,
        "review",
        "mark",
        "8",
        "--note",
        "asked the PLC team",
        "--by",
        "ana",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "arrival 8 (identity_incomplete) marked reviewed" in out.stdout
    empty = subprocess.run([*cmd[:-4], "--note", " "], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2
    dup = subprocess.run([*cmd[:8], "2", *cmd[9:]], capture_output=True, text=True, timeout=60)
    assert dup.returncode == 2 and "only conflicts and identity-incomplete" in dup.stderr


async def test_the_pages_connections_cannot_write(filled: str) -> None:
    import psycopg

    pool = Pool(filled, size=1)
    try:
        async with pool.reading() as conn:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                await conn.execute(
                    "INSERT INTO review_mark (arrival_id, kind, note) VALUES (8, 'identity_incomplete', 'x')"
                )
    finally:
        await pool.close()
    assert await marks(filled) == []


async def test_conflicts_mark_exactly_the_fields_that_differ(client: TestClient) -> None:  # type: ignore[type-arg]
    text = await (await client.get("/conflicts?source=PUMP-08/Trip")).text()
    assert (
        '<tr class="differs"><td>payload.severity</td><td>&quot;High&quot;</td><td>&quot;Low&quot;</td></tr>'
        in text
    )
    assert '<tr class="differs"><td>payload hash</td>' in text
    assert "<tr><td>payload.state</td>" in text and "<tr><td>sourceTimestamp</td>" in text
    assert "<tr><td>gateway</td>" in text  # evidence, never part of a conflict
    from agent.ledger.web.review_pages import differing

    assert differing({"a": 1, "b": 2}, {"a": 1, "c": 2}) == [
        ("a", 1, 1, False),
        ("b", 2, differing.__globals__["_ABSENT"], True),
        ("c", differing.__globals__["_ABSENT"], 2, True),
    ]

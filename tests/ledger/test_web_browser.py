"""The review page in a real browser: Playwright for Python driving Debian's chromium (never
Playwright's own browser download), against `edge-agent ledger web` run as a real process over a
real PostgreSQL filled with the seed's cases.

One browser per test session. Skips, saying why, without chromium or playwright.
EDGE_WEB_SCREENSHOTS=DIR also saves a screenshot of each page there (docs/web/ holds them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pgcluster
import psycopg
import pytest
import webfill

CHROMIUM = os.environ.get("EDGE_AGENT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "browser-token"


def off_loop(fn: Any) -> Any:
    """Run a coroutine function to its end on a thread of its own (sync Playwright owns this thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, fn()).result()


@pytest.fixture(scope="module")
def browser(pg_cluster: pgcluster.Cluster) -> Iterator[Any]:
    # One browser for this module's tests. Module scope, not session: sync Playwright runs an event
    # loop on this thread while it is open, and the async tests of other modules need the thread's
    # loop free. pg_cluster first: its set-up runs asyncio.run, which cannot run inside that loop.
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium at /usr/bin/chromium: apt-get install chromium")
    pw = sync_api.sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    except Exception as exc:  # the reason chromium would not start, shown in the skip
        pw.stop()
        pytest.skip(f"chromium did not start: {str(exc).splitlines()[0]}")
    try:
        yield b
    finally:
        b.close()
        pw.stop()


@pytest.fixture(scope="module")
def site(pg_cluster: pgcluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A filled ledger and `edge-agent ledger web` serving it (writes allowed with the token)."""
    tmp = tmp_path_factory.mktemp("web")
    name = "w_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE ledger_template")
    dsn = pg_cluster.dsn(name)

    async def fill() -> None:
        from agent.ledger.connection import connect

        conn = await connect(dsn)
        try:
            await webfill.fill(conn, tmp)
        finally:
            await conn.close()

    off_loop(fill)
    (tmp / "token").write_text(TOKEN + "\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "ledger",
            "--dsn",
            dsn,
            "web",
            "--listen",
            "127.0.0.1:0",
            "--auth-file",
            str(tmp / "token"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert m, f"ledger web did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        yield {"url": m.group(1), "dsn": dsn, "pg_dump": str(pg_cluster.bindir / "pg_dump"), "tmp": tmp}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def dump(site: dict[str, Any]) -> str:
    """The database's data as pg_dump writes it."""
    out = subprocess.run(
        [site["pg_dump"], "--data-only", "--no-owner", "-d", site["dsn"]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # pg_dump's \\restrict line carries a random key per run: the only line that differs by itself
    return "\n".join(
        line for line in out.stdout.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))
    )


def crawl(page: Any, start: str) -> dict[str, int]:
    """Every same-site link reachable from `start`: page -> HTTP status (exports fetched, not rendered)."""
    seen: dict[str, int] = {}
    todo = [start]
    while todo and len(seen) < 300:
        url = todo.pop()
        if url in seen:
            continue
        if "format=" in url:
            seen[url] = page.request.get(url).status
            continue
        resp = page.goto(url)
        seen[url] = resp.status
        for href in page.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))"):
            target = urljoin(url, href).split("#")[0]
            if urlsplit(target).netloc == urlsplit(start).netloc and target not in seen:
                todo.append(target)
    return seen


def test_every_link_opens_and_a_crawl_of_every_get_leaves_the_database_unchanged(
    browser: Any, site: dict[str, Any]
) -> None:
    before = dump(site)
    ctx = browser.new_context()
    page = ctx.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    statuses = crawl(page, site["url"])
    assert {s for s in statuses.values()} == {200}, {u: s for u, s in statuses.items() if s != 200}
    paths = {urlsplit(u).path for u in statuses}
    assert {"/", "/events", "/conflicts", "/pending", "/timeline", "/notifications", "/login"} <= paths
    assert any(p.startswith("/events/") for p in paths)
    # the hostile payload is text on the page, and no script ran
    hostile = off_loop(lambda: _hostile_event(site["dsn"]))
    page.goto(urljoin(site["url"], f"/events/{hostile}"))
    assert webfill.SCRIPT in page.inner_text("main")
    page.goto(urljoin(site["url"], "/conflicts"))
    assert webfill.SCRIPT in page.inner_text("main")
    assert dialogs == []
    shots = os.environ.get("EDGE_WEB_SCREENSHOTS")
    if shots:
        _screenshots(page, site["url"], Path(shots), hostile)
    ctx.close()
    assert dump(site) == before


async def _hostile_event(dsn: str) -> int:
    from agent.ledger.connection import connect

    conn = await connect(dsn)
    try:
        cur = await conn.execute("SELECT id FROM canonical_event WHERE source = 'PUMP-09/Trip'")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])
    finally:
        await conn.close()


def _screenshots(page: Any, base: str, folder: Path, hostile: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    for name, path in [
        ("overview", "/"),
        ("events", "/events"),
        ("event", f"/events/{hostile}"),
        ("conflicts", "/conflicts"),
        ("pending", "/pending"),
        ("timeline", "/timeline?device=PUMP-07"),
        ("notifications", "/notifications"),
    ]:
        page.goto(urljoin(base, path))
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_a_mark_made_in_the_browser_is_listed_and_no_foreign_post_writes(
    browser: Any, site: dict[str, Any], tmp_path: Path
) -> None:
    base = site["url"]
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(urljoin(base, "/conflicts"))
    page.click("text=Sign in with the token")
    page.fill("input[name=token]", TOKEN)
    page.click("button:has-text('Sign in')")
    assert urlsplit(page.url).path == "/conflicts"
    form = page.locator("form.mark").first
    form.locator("input[name=note]").fill("firmware re-sent the severity; canonical kept")
    form.locator("input[name=by]").fill("ana")
    form.locator("button").click()
    assert "reviewed" in page.inner_text(
        "main"
    ) and "firmware re-sent the severity; canonical kept" in page.inner_text("main")
    page.goto(urljoin(base, "/conflicts?state=reviewed"))
    assert "by ana: firmware re-sent the severity" in page.inner_text("main")
    shots = os.environ.get("EDGE_WEB_SCREENSHOTS")
    if shots:  # signed in: the mark listed and the form to add another
        page.set_viewport_size({"width": 1280, "height": 900})
        page.screenshot(path=str(Path(shots) / "conflicts-signed-in.png"), full_page=True)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    before = dump(site)

    # another origin (same host, other port: same site, so the cookie goes along) with a leaked CSRF token
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "index.html").write_text(
        f'<form method="post" action="{base}arrivals/8/mark"><input name="csrf" value="{csrf}">'
        '<input name="note" value="forged"><input name="by" value="mallory"><button>go</button></form>'
    )
    port = pgcluster.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(evil)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                page.goto(f"http://127.0.0.1:{port}/index.html")
                break
            except Exception:
                page.wait_for_timeout(100)
        with page.expect_response(lambda r: "/mark" in r.url) as got:
            page.click("button")
        assert got.value.status == 403
    finally:
        server.terminate()
        server.wait(timeout=10)
    # the signed-in browser without the CSRF token, and a browser never signed in
    assert (
        page.request.post(
            urljoin(base, "/arrivals/8/mark"),
            form={"note": "x", "by": "y"},
            headers={"Origin": base.rstrip("/")},
        ).status
        == 403
    )
    stranger = browser.new_context()
    assert (
        stranger.request.post(
            urljoin(base, "/notifications/1/retry"),
            form={"csrf": csrf or ""},
            headers={"Origin": base.rstrip("/")},
        ).status
        == 403
    )
    stranger.close()
    ctx.close()
    assert dump(site) == before


def test_a_bidirectional_override_is_shown_escaped_in_the_browser(browser: Any, site: dict[str, Any]) -> None:
    """Issue 36: `Pumpe U+202E evil U+202C` must not render as "Pumpe live"; the page shows the
    controls as escapes, as the command line does."""
    name = "Pumpe \u202eevil\u202c"

    async def add() -> None:
        from agent.ledger import gateway_status
        from agent.ledger.connection import connect

        conn = await connect(site["dsn"])
        try:
            await gateway_status.record(
                conn, {"site": "plant-1", "gateway": name, "at": "2026-12-06T02:00:00.000Z"}, "mqtt"
            )
        finally:
            await conn.close()

    off_loop(add)
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(site["url"])
    text = page.inner_text("main")
    ctx.close()
    assert "Pumpe \\u202eevil\\u202c" in text
    assert "\u202e" not in text and "\u202c" not in text

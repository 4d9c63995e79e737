"""The review page while PostgreSQL is stopped (issue 38): every page answers 503 with Retry-After and
a short page saying since when and that nothing is acknowledged meanwhile, one log line per outage instead of a
traceback per request; once PostgreSQL is back the same pages answer 200."""

from __future__ import annotations

import asyncio
import logging

import pgcluster
import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.ledger.web.app import make_app
from agent.ledger.web.pool import Pool
from agent.ledger.web.security import Guard

PAGES = ["/", "/events", "/conflicts", "/pending", "/timeline", "/notifications"]


async def test_pages_answer_503_while_the_database_is_down_and_200_when_it_is_back(
    own_cluster: pgcluster.Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    own = own_cluster
    client = TestClient(TestServer(make_app(Pool(own.dsn(), size=2), Guard(None), silent_after=300)))
    await client.start_server()
    try:
        for path in PAGES:
            assert (await client.get(path)).status == 200, path
        await asyncio.to_thread(own.stop, "fast")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="agent.ledger.web.outage"):
            for path in PAGES:
                resp = await client.get(path)
                text = await resp.text()
                assert resp.status == 503, (path, text[:500])
                assert resp.headers["Retry-After"] == "5"
                assert "The ledger's database is unreachable" in text and "Since " in text
                assert "Nothing is acknowledged while it is away" in text
                assert "Traceback" not in text
                assert "Content-Security-Policy" in resp.headers  # the page's own headers still apply
            assert [r.levelname for r in caplog.records] == ["ERROR"], "one line per outage"
            await asyncio.to_thread(own.start)
            for path in PAGES:
                for _ in range(50):
                    resp = await client.get(path)
                    if resp.status == 200:
                        break
                    await asyncio.sleep(0.2)
                assert resp.status == 200, path
            assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"], "and one when it ends"
    finally:
        await client.close()

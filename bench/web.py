"""Review page benchmark: each page's time beside its main query run bare, on a big ledger.

Prints ONE JSON line. A throwaway PostgreSQL cluster of its own holds a ledger made inside the
server (tests/ledger/bigledger.py: by default 1,000,000 canonical events, 2,000,000 arrivals,
500,000 notifications, 1,000 conflicts and 1,000 pending arrivals). `edge-agent ledger web` runs
as its own process; each page is requested over loopback (the time a client sees: HTTP, every
query of the page and the HTML), and the page's main query is run bare through psycopg in this
process (one round trip). Page and bare alternate in rounds (medians of p50 and p95 over the
rounds are not used: the percentiles are taken over all requests of every round together).

    python bench/web.py                   # 1,000,000 events, 200 requests per page and variant, 4 rounds
    python bench/web.py --quick           # 5,000 events, 10 requests: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, LiteralString

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster and big ledger

import aiohttp  # noqa: E402
import bigledger  # noqa: E402
import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from agent.ledger import migrations  # noqa: E402
from agent.ledger.connection import connect  # noqa: E402
from agent.ledger.web import queries  # noqa: E402


def pages(s: dict[str, Any]) -> dict[str, tuple[str, LiteralString, dict[str, Any]]]:
    """page name -> (path, its main query, the query's parameters)."""
    lim = {"limit": 50}
    return {
        "overview": ("/", queries.FLEET, {}),
        "events": ("/events", queries.events_sql({}), lim),
        "events_by_source": (f"/events?source={s['source']}", queries.events_sql({"source": 1}), {**lim, "source": s["source"]}),
        "events_by_gateway": (f"/events?gateway={s['gateway']}", queries.events_sql({"gateway": 1}), {**lim, "gateway": s["gateway"]}),
        "events_by_time": (
            f"/events?since={s['since']}&until={s['until']}",
            queries.events_sql({"since": 1, "until": 1}),
            {**lim, "since": s["since"], "until": s["until"]},
        ),
        "event": (f"/events/{s['canonical_id']}", queries.EVENT_ARRIVALS, {"id": s["canonical_id"]}),
        "conflicts_open": ("/conflicts?state=open", queries.conflicts_sql({"state": "open"}), lim),
        "pending_open": ("/pending?state=open", queries.pending_sql({"state": "open"}), lim),
        "timeline": (f"/timeline?device={s['device']}", queries.DEVICE_BOOTS, {**lim, "device": s["device"]}),
        "notifications_dead": ("/notifications?state=dead", queries.notifications_sql({"state": "dead"}), {**lim, "state": "dead"}),
    }  # fmt: skip


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def measure(base: str, dsn: str, plan: dict[str, Any], requests: int, rounds: int) -> dict[str, Any]:
    page_t: dict[str, list[float]] = {k: [] for k in plan}
    bare_t: dict[str, list[float]] = {k: [] for k in plan}
    per_round = max(1, requests // rounds)
    conn = await connect(dsn)
    await conn.set_autocommit(True)
    async with aiohttp.ClientSession() as http:
        for name, (path, sql, params) in plan.items():  # warm both (caches, prepared plans)
            async with http.get(base + path) as r:
                assert r.status == 200, (name, r.status, await r.text())
                await r.read()
            await (await conn.execute(sql, params)).fetchall()
        for _ in range(rounds):
            for name, (path, sql, params) in plan.items():
                for _ in range(per_round):
                    t = time.perf_counter()
                    async with http.get(base + path) as r:
                        await r.read()
                    page_t[name].append(time.perf_counter() - t)
                for _ in range(per_round):
                    t = time.perf_counter()
                    await (await conn.execute(sql, params)).fetchall()
                    bare_t[name].append(time.perf_counter() - t)
    await conn.close()
    out = {}
    for name in plan:
        p, b = page_t[name], bare_t[name]
        out[name] = {
            "page_p50_ms": round(pct(p, 0.5) * 1000, 2),
            "page_p95_ms": round(pct(p, 0.95) * 1000, 2),
            "bare_p50_ms": round(pct(b, 0.5) * 1000, 2),
            "bare_p95_ms": round(pct(b, 0.95) * 1000, 2),
            "page_vs_bare_p50": round(pct(p, 0.5) / max(pct(b, 0.5), 1e-9), 2),
            "requests": len(p),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=200, help="per page and variant, over all rounds")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="5,000 events and 10 requests (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.events, a.requests, a.rounds = 5_000, 10, 2
    bindir = pgcluster.find_binaries()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
    cluster = pgcluster.create(bindir, durable=False)
    web: subprocess.Popen[str] | None = None
    try:
        name = "web_" + uuid.uuid4().hex[:8]
        with psycopg.connect(cluster.dsn(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        dsn = cluster.dsn(name)

        async def migrate() -> None:
            conn = await connect(dsn)
            await migrations.migrate(conn)
            await conn.close()

        asyncio.run(migrate())
        t = time.monotonic()
        with psycopg.connect(dsn) as c:
            bigledger.fill(c, a.events)
            sample = {**bigledger.sample(c), "device": "plant/DEV-123"}
            arrivals = c.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE relname = 'arrival'"
            ).fetchone()
        fill_s = time.monotonic() - t
        web = subprocess.Popen(
            [sys.executable, "-m", "agent", "ledger", "--dsn", dsn, "web", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert web.stdout is not None
        m = re.search(r"(http://127\.0\.0\.1:\d+)/", web.stdout.readline())
        if m is None:
            sys.exit(f"ledger web did not start: {web.stderr.read() if web.stderr else ''}")
        plan = pages(sample)
        got = asyncio.run(measure(m.group(1), dsn, plan, a.requests, a.rounds))
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=30)
        cluster.destroy()
    worst = max(v["page_p95_ms"] for v in got.values())
    ratios = [v["page_vs_bare_p50"] for v in got.values()]
    print(
        json.dumps(
            {
                "bench": "web",
                "events": a.events,
                "arrivals_estimate": int(arrivals[0]) if arrivals else None,
                "fill_s": round(fill_s, 1),
                "rounds": a.rounds,
                "pages": got,
                "max_page_p95_ms": worst,
                "median_page_vs_bare_p50": round(statistics.median(ratios), 2),
                "loadavg": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()

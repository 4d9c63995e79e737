"""A damaged store with a backlog: the real agent process, upstream down while 60 transitions
are recorded, kill -9, pages overwritten. At the next start the new store takes the undelivered
events it can read from the damaged file, says how many (log, `status --json`), and sends them
upstream with `replayed: true` and their stable ids: far more than the controllers' rings
(10 entries each) could give back. Every transition made is upstream or counted as unreadable.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.timeout(120)

MADE = 60


def overwrite_btree_pages(db: Path, rng: random.Random, pages: int) -> None:
    """Damage the headers of `pages` leaf pages of the canonical events (found with `dbstat`, so
    the damage hits rows salvage must take, whatever the schema's page layout is)."""
    with sqlite3.connect(db) as con:
        leaves = [
            int(n)
            for (n,) in con.execute(
                "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno"
            )
        ]
    con.close()
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    for n in rng.sample(leaves, pages):
        data[(n - 1) * size + 1 : (n - 1) * size + 12] = rng.randbytes(11)
    db.write_bytes(bytes(data))


def quick_check(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return "; ".join(r[0] for r in con.execute("PRAGMA quick_check").fetchall())
    except sqlite3.DatabaseError as exc:
        return f"error: {exc}"
    finally:
        con.close()


async def test_the_undelivered_events_of_a_damaged_store_go_upstream_replayed_from_the_new_one(
    harness: ModuleType, checker: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "events.db"
    async with harness.rig(tmp_path, devices=2) as (_plant, rx, agent, load):
        rx.fail(503)  # the upstream refuses everything: a backlog builds in the outbox
        await agent.start()
        await agent.started()
        for i in range(MADE):
            await load.transition(f"PLC-{i % 2:02d}", ("Trip", "OverTemp")[i % 3 % 2])
            if i % 10 == 9:  # 5 per controller, then wait: inside a 10-entry ring, nothing overruns
                await harness.eventually(
                    lambda: set(checker.committed_keys(db)) >= load.made, 30, "committed"
                )
        await agent.kill9()
        con = sqlite3.connect(db)  # fold the WAL in, so the damage hits the pages in use
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        overwrite_btree_pages(db, random.Random(5), pages=1)
        assert quick_check(db) != "ok", "precondition: the damage is detected"

        rx.heal()
        await agent.start()
        await agent.started(timeout=10)
        run = agent.this_run()
        assert "ALARM store was damaged" in run and "ALARM salvage from" in run, run[-3000:]
        salvage = (await agent.status())["service"]["salvage"]
        assert salvage is not None and salvage["events"] > 2 * (10 + 2), salvage  # more than the rings hold
        assert salvage["outbox_rows"] >= salvage["events"]

        wanted = {checker.cloud_id(harness.SITE, k) for k in load.made}
        await harness.eventually(
            lambda: len(wanted & rx.distinct) >= salvage["events"], 30, "salvaged events upstream"
        )
        rc, _ = await agent.stop()
        assert rc == 0
        assert "Traceback" not in Path(agent.log).read_text()

    sent = {(e["source"], e["id"]): e for e in rx.events if e["type"] == "io.edgeagent.transition"}
    salvaged_keys = set(checker.committed_keys(db))
    assert len(salvaged_keys & load.made) >= salvage["events"]
    for key in salvaged_keys & load.made:
        event = sent[checker.cloud_id(harness.SITE, key)]
        assert event["replayed"] is True, event
    # nothing silently gone: a transition made is upstream, or among what could not be read
    missing = wanted - rx.distinct
    assert len(missing) <= salvage["unreadable_rows"] + salvage["outbox_rows_lost"], (missing, salvage)

"""A damaged store at start-up: bytes flipped in the database file, and separately in its WAL.

What is guaranteed, precisely:

* Flips in the b-tree page headers of the database file (cell count, cell pointers, content
  offset), which `PRAGMA quick_check` detects (the test asserts that first): the agent starts
  within 10 s, moves the database, WAL and SHM aside together (`events.db.corrupt-<time>*`;
  SQLite folds a WAL into its database when the failed open closes, so often only the database
  file is left to move, and never a WAL beside the new store),
  starts a new store that takes what it can still read from the old one (salvage), raises an
  alarm (an `ALARM` log line and `status --json`'s `service.store_problem`), and keeps
  running: never a crash loop.
* Flips in the WAL: SQLite checks every WAL frame's checksum and stops recovery at the first
  bad frame, so the commits from there on are dropped *without any error* (quick_check cannot
  see them: they are no longer part of the database). The agent then starts within 10 s with
  what the database file and the good frames hold, without a crash, the store passes
  `integrity_check`, nothing is invented, and the controllers' ring buffers give back what
  was dropped (each controller here made fewer transitions than its ring holds, which is the
  only reason nothing is lost). The agent reads the WAL itself before opening the store, so
  the dropped commits are alarmed (`ALARM store WAL was damaged`, with their count, in the log
  and `status`) and a copy of the WAL is kept (`events.db.wal-damaged-<time>`).
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.timeout(90)

START_WITHIN_S = 10.0


def btree_pages(db: Path) -> list[int]:
    data = db.read_bytes()
    size = int.from_bytes(data[16:18], "big") or 65536
    out = []
    for n in range(2, len(data) // size + 1):  # page 1 holds the file header first
        if data[(n - 1) * size] in (2, 5, 10, 13):
            out.append(n)
    return out


def flip_btree_headers(db: Path, rng: random.Random, pages: int = 3) -> list[int]:
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    chosen = rng.sample(btree_pages(db), pages)
    for n in chosen:
        for off in rng.sample(range(1, 8), 3):
            data[(n - 1) * size + off] ^= rng.randrange(1, 256)
    db.write_bytes(bytes(data))
    return chosen


def quick_check(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return "; ".join(r[0] for r in con.execute("PRAGMA quick_check").fetchall())
    except sqlite3.DatabaseError as exc:
        return f"error: {exc}"
    finally:
        con.close()


async def make_events(harness: ModuleType, agent: object, load: object, n: int) -> None:
    for i in range(n):
        await load.transition(f"PLC-{i % 2:02d}", ("Trip", "OverTemp")[i % 3 % 2])  # type: ignore[attr-defined]


async def test_flipped_bytes_in_the_database_are_moved_aside_with_an_alarm_and_a_new_store(
    harness: ModuleType, checker: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "events.db"
    async with harness.rig(tmp_path, devices=2) as (_plant, rx, agent, load):
        await agent.start()
        await agent.started()
        await make_events(harness, agent, load, 8)
        await harness.eventually(lambda: len(checker.committed_keys(db)) == 8, 20, "events committed")
        await agent.stop()
        for i in range(40):  # make the file bigger than a handful of pages
            await load.transition(f"PLC-{i % 2:02d}", "Trip")
        await agent.start()
        await harness.eventually(lambda: len(checker.committed_keys(db)) >= 24, 20, "more events")
        await agent.kill9()  # leaves a WAL and an SHM next to the database
        assert Path(f"{db}-wal").exists()
        con = sqlite3.connect(db)  # fold the WAL in, so the flips hit the pages in use
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        chosen = flip_btree_headers(db, random.Random(1234))
        assert quick_check(db) != "ok", f"precondition: quick_check detects the flips in pages {chosen}"

        # What the damaged store held is in the moved-aside file; the check is of the new store.
        load.made.clear()
        rx.events.clear()
        rx.distinct.clear()
        t0 = time.monotonic()
        await agent.start()
        await agent.started(timeout=START_WITHIN_S)
        assert time.monotonic() - t0 < START_WITHIN_S
        assert "ALARM store was damaged" in agent.this_run()
        moved = {p.name.split(".corrupt-")[1][16:] for p in tmp_path.iterdir() if ".corrupt-" in p.name}
        assert "" in moved and moved <= {"", "-wal", "-shm"}, moved
        # A new store (the old one held 48 events, nearly all delivered): all it can hold yet is
        # what the two controllers' rings (10 slots each) and their current values (2 channels
        # each) give back, plus what is salvaged from the damaged file: the few undelivered
        # events and the last one recorded per channel, which the rings hold anyway
        # (tests/faults/test_salvage_store.py has a real backlog).
        assert len(checker.committed_keys(db)) <= 2 * (10 + 2)
        status = await agent.status()
        assert "damaged" in (status["service"]["store_problem"] or ""), status
        await load.transition("PLC-00", "Trip")
        verdict = await harness.drain_and_check(agent, rx, db, load)
        assert "Traceback" not in harness.Path(agent.log).read_text()
    assert verdict.integrity == [] and verdict.duplicates == [] and verdict.without_outbox == 0
    assert verdict.upstream_invented == [] and verdict.upstream_missing == []
    assert verdict.committed >= 2  # the ring buffers re-filled the new store (at most 10 per controller)
    assert agent.starts == 3  # one start after the damage: no crash loop


async def test_flipped_bytes_in_the_wal_never_crash_the_agent_and_the_rings_give_back_what_was_dropped(
    harness: ModuleType, checker: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "events.db"
    rng = random.Random(99)
    async with harness.rig(tmp_path, devices=2) as (_plant, rx, agent, load):
        await agent.start()
        await agent.started()
        await make_events(harness, agent, load, 12)  # 6 per controller: inside a 10-slot ring
        await harness.eventually(lambda: set(checker.committed_keys(db)) >= load.made, 20, "committed")
        before = set(checker.committed_keys(db))
        await agent.kill9()
        wal = Path(f"{db}-wal")
        data = bytearray(wal.read_bytes())
        assert len(data) > 32 + 4096, "precondition: the WAL holds frames"
        for off in rng.sample(range(32, len(data)), 16):
            data[off] ^= rng.randrange(1, 256)
        wal.write_bytes(bytes(data))

        t0 = time.monotonic()
        await agent.start()
        await agent.started(timeout=START_WITHIN_S)
        assert time.monotonic() - t0 < START_WITHIN_S
        assert set(checker.committed_keys(db)) <= before  # dropped frames, nothing invented
        assert "ALARM store WAL was damaged" in agent.this_run()
        assert "WAL was damaged" in ((await agent.status())["service"]["store_problem"] or "")
        assert any(".wal-damaged-" in p.name for p in tmp_path.iterdir())
        verdict = await harness.drain_and_check(agent, rx, db, load)
    assert verdict.ok, verdict.problems()
    assert verdict.made == verdict.committed == 12

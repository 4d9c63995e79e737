"""A damaged WAL: SQLite drops every commit from the first bad frame on without an error, so
the agent reads the WAL itself before opening the store and raises an alarm with the count,
keeping a copy of the WAL. A WAL torn by a crash in the middle of a commit is no alarm."""

from __future__ import annotations

import random
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config.loader import Config, StoreConfig
from agent.service.store_open import open_store
from agent.store.wal_check import FRAME_HEADER, HEADER, wal_damage

COMMITS = 12


def crashed_store(tmp_path: Path) -> Path:
    """A store file with a WAL of 12 commits, as a crash leaves it (copied while open)."""
    live = tmp_path / "live.db"
    con = sqlite3.connect(live, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE notes(x)")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(COMMITS):
        con.execute("INSERT INTO notes VALUES (?)", (f"row {i} " + "x" * 3000,))
    db = tmp_path / "events.db"
    shutil.copyfile(live, db)
    shutil.copyfile(f"{live}-wal", f"{db}-wal")
    con.close()
    return db


def frames(wal: Path) -> tuple[int, int]:
    data = wal.read_bytes()
    size = FRAME_HEADER + int.from_bytes(data[8:12], "big")
    return (len(data) - HEADER) // size, size


def rows(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM notes").fetchone()[0])
    finally:
        con.close()


def test_an_intact_wal_is_no_damage(tmp_path: Path) -> None:
    db = crashed_store(tmp_path)
    assert wal_damage(f"{db}-wal") is None
    assert wal_damage(tmp_path / "no-such-wal") is None
    assert rows(db) == COMMITS


def test_a_commit_torn_at_the_end_of_the_wal_is_no_damage(tmp_path: Path) -> None:
    db = crashed_store(tmp_path)
    wal = Path(f"{db}-wal")
    n, size = frames(wal)
    data = bytearray(wal.read_bytes())
    data[HEADER + (n - 1) * size + FRAME_HEADER + 100] ^= 0xFF  # the last frame: half written
    wal.write_bytes(bytes(data))
    assert wal_damage(wal) is None
    assert rows(db) == COMMITS - 1  # SQLite drops that last commit, which never returned


@pytest.mark.parametrize("where", [pytest.param(0.3, id="early frame"), pytest.param(0.6, id="middle frame")])
def test_a_damaged_frame_with_commits_after_it_is_found_and_counted(tmp_path: Path, where: float) -> None:
    db = crashed_store(tmp_path)
    wal = Path(f"{db}-wal")
    n, size = frames(wal)
    bad = int(n * where)
    data = bytearray(wal.read_bytes())
    rng = random.Random(bad)
    for off in rng.sample(range(FRAME_HEADER, size), 8):
        data[HEADER + bad * size + off] ^= rng.randrange(1, 256)
    wal.write_bytes(bytes(data))
    damage = wal_damage(wal)
    assert damage is not None and damage.first_bad_frame == bad + 1
    assert damage.dropped_frames == n - bad
    kept = rows(db)  # what SQLite applies: the commits before the bad frame
    assert kept + damage.dropped_commits == COMMITS, (kept, damage)


async def test_the_agent_alarms_on_a_damaged_wal_and_keeps_a_copy(tmp_path: Path) -> None:
    db = crashed_store(tmp_path)
    wal = Path(f"{db}-wal")
    original = wal.read_bytes()
    n, size = frames(wal)
    data = bytearray(original)
    data[HEADER + (n // 2) * size + FRAME_HEADER + 7] ^= 0x55
    wal.write_bytes(bytes(data))
    cfg = Config("plant-1", "gw", StoreConfig(str(db)), ())
    store, alarm, salvaged = await open_store(str(db), cfg, lambda: datetime(2026, 4, 22, tzinfo=UTC))
    await store.close()
    assert salvaged is None
    assert alarm is not None and "WAL was damaged" in alarm and "committed transactions" in alarm
    copy = tmp_path / "events.db.wal-damaged-20260422T000000Z"
    assert copy.read_bytes() == bytes(data) and f"a copy of the WAL is at {copy}" in alarm

"""The live state in a file in memory: which directory is taken, the file replaced whole, and a
running store that writes no live-state row (`agent.store.live_file`)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agent.store import live_file
from agent.store.reader import Reader
from agent.store.store import Store


def mounts(tmp_path: Path, *lines: str) -> str:
    f = tmp_path / "mounts"
    f.write_text("".join(line + "\n" for line in lines))
    return str(f)


def test_the_longest_mount_point_above_a_path_names_its_filesystem(tmp_path: Path) -> None:
    table = mounts(
        tmp_path, "/dev/vda / ext4 rw 0 0", "tmpfs /run tmpfs rw 0 0", "tmpfs /run/user/0 tmpfs rw 0 0"
    )
    assert live_file.filesystem_of(Path("/run/edge-agent"), table) == "tmpfs"
    assert live_file.filesystem_of(Path("/var/lib/edge-agent"), table) == "ext4"
    assert live_file.filesystem_of(Path("/running"), table) == "ext4"  # a prefix is not a parent


def test_only_a_directory_in_memory_is_taken(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    ram = tmp_path / "ram"
    disk.mkdir()
    ram.mkdir()
    table = mounts(tmp_path, "/dev/vda / ext4 rw 0 0", f"tmpfs {ram} tmpfs rw 0 0")
    env = {"RUNTIME_DIRECTORY": str(disk / "edge-agent"), "XDG_RUNTIME_DIR": str(ram)}
    got = live_file.choose("abc", env, table)
    assert got == ram / "edge-agent" / "live-abc.json"
    assert (
        live_file.choose("abc", {"RUNTIME_DIRECTORY": str(disk)}, mounts(tmp_path, "/dev/vda / ext4 rw 0 0"))
        is None
    )


def test_the_file_is_replaced_whole_and_a_missing_one_is_no_state(tmp_path: Path) -> None:
    path = tmp_path / "live.json"
    live_file.write(path, "2026-12-06T00:00:00.000Z", json.dumps({"pid": 1}))
    live_file.write(path, "2026-12-06T00:00:02.000Z", json.dumps({"pid": 2}))
    assert live_file.read(str(path)) == ("2026-12-06T00:00:02.000Z", '{"pid": 2}')
    assert [p.name for p in tmp_path.iterdir()] == ["live.json"]
    assert live_file.read(str(tmp_path / "gone.json")) is None


async def test_a_store_with_a_live_file_writes_no_live_state_row_and_status_reads_the_file(
    tmp_path: Path,
) -> None:
    store = await Store.open(tmp_path / "s.db")
    try:
        await store.write_live_state("service", "2026-12-06T00:00:00.000Z", '{"old": true}')
        await store.use_live_file(tmp_path / "live.json")
        await store.write_live_state("service", "2026-12-06T00:00:02.000Z", '{"pid": 7}')
    finally:
        await store.close()
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("SELECT count(*) FROM live_state").fetchone()[0] == 0  # the old row went too
    con.close()
    async with await Reader.open(tmp_path / "s.db") as reader:
        assert await reader.live_state("service") == ("2026-12-06T00:00:02.000Z", '{"pid": 7}')
    (tmp_path / "live.json").unlink()  # a reboot empties /run: no state, not a stale one
    async with await Reader.open(tmp_path / "s.db") as reader:
        assert await reader.live_state("service") is None


async def test_a_live_file_that_cannot_be_written_hands_the_live_state_back_to_the_store(
    tmp_path: Path,
) -> None:
    """Else `status` would read the stale file and call a healthy service NOT RESPONDING."""
    gone = tmp_path / "run"
    gone.mkdir()
    store = await Store.open(tmp_path / "s.db")
    try:
        await store.use_live_file(gone / "live.json")
        await store.write_live_state("service", "2026-12-06T00:00:00.000Z", '{"pid": 1}')
        (gone / "live.json").unlink()
        gone.rmdir()  # the runtime directory went away (removed by hand, a unit without Preserve)
        await store.write_live_state("service", "2026-12-06T00:00:02.000Z", '{"pid": 2}')
    finally:
        await store.close()
    async with await Reader.open(tmp_path / "s.db") as reader:
        assert await reader.live_state("service") == ("2026-12-06T00:00:02.000Z", '{"pid": 2}')


async def test_a_new_store_has_small_pages_and_checkpoints_by_wal_bytes_an_old_one_keeps_its_pages(
    tmp_path: Path,
) -> None:
    """docs/performance.md, "Flash": 1 KiB pages write about half as much per commit."""
    from agent.store.connection import PAGE_SIZE, WAL_CHECKPOINT_BYTES

    old = tmp_path / "old.db"
    con = sqlite3.connect(old)  # a store made with SQLite's default pages
    con.execute("PRAGMA page_size=4096")
    con.execute("CREATE TABLE t(x)")
    con.close()
    for path, page in ((tmp_path / "new.db", PAGE_SIZE), (old, 4096)):
        store = await Store.open(path)
        try:
            got = [
                list(await store.db.execute_fetchall(f"PRAGMA {p}"))[0][0]
                for p in ("page_size", "wal_autocheckpoint")
            ]
        finally:
            await store.close()
        assert got == [page, WAL_CHECKPOINT_BYTES // page], path

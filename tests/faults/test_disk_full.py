"""The store's disk fills up for real (a small tmpfs filled with ballast), and separately the
store's own quota (`store.max_size`, SQLite's max_page_count) is reached.

Policy (docs/operations.md): never drop an unsent event. The recorder holds the batch it could
not commit and retries every second, the queue holds what is polled meanwhile, pollers wait
when the queue is full, and the controllers' ring buffers are the backstop. The agent stays up,
says so (an ERROR line, `status --json`), and resumes by itself once space is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from agent.store.store import Store

pytestmark = pytest.mark.timeout(120)

POLL_S = 1.0
RESERVE = 256 * 1024
FULL_LINE = "store write failed; holding"
BACK_LINE = "store writable again"


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "8m") -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for a real full disk needs root")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> int:
    """Write ballast until the filesystem says ENOSPC; returns the bytes written."""
    n, fd = 0, os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            n += os.write(fd, b"\0" * 4096)
    except OSError:
        return n
    finally:
        os.close(fd)


async def test_a_full_disk_holds_events_says_so_and_resumes_by_itself(
    harness: ModuleType, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        db = disk / "events.db"
        rig = harness.rig(tmp_path, devices=2, poll=f"{POLL_S}s", store=db, reserve="1MiB")
        async with rig as (_plant, rx, agent, load):
            await agent.start()
            await agent.started()
            assert (disk / "events.db.reserve").stat().st_size == 1024 * 1024
            load.start(2.0, seed=3)  # 1 per second per controller: far inside a 10-slot ring
            await harness.eventually(lambda: len(rx.distinct) >= 3, 20, "first events upstream")
            assert fill(disk / "ballast") > 0
            await agent.wait_for_log(FULL_LINE, timeout=15)
            await agent.wait_for_log("ALARM store disk full: released the store reserve", timeout=5)
            assert not (disk / "events.db.reserve").exists()
            await asyncio.sleep(3 * POLL_S)  # the disk stays full while transitions go on
            assert agent.alive(), agent.this_run()
            status = await agent.status()
            assert status["store"]["problem"], status  # the operator sees it
            assert "full" in status["store"]["problem"]

            (disk / "ballast").unlink()
            freed = time.monotonic()
            await agent.wait_for_log(BACK_LINE, timeout=10)
            resumed = time.monotonic() - freed
            assert resumed < POLL_S + 1.0, f"resumed {resumed:.1f}s after space was freed"
            await harness.eventually(lambda: (disk / "events.db.reserve").exists(), 10, "reserve kept again")
            await load.halt()
            verdict = await harness.drain_and_check(agent, rx, db, load)
            after = await agent.status()
    assert verdict.ok, verdict.problems()
    assert verdict.made == verdict.committed > 0
    assert after["store"]["problem"] is None, after


def set_quota(config: Path, max_bytes: int | None, reserve: int = RESERVE) -> None:
    doc = yaml.safe_load(config.read_text())
    doc["store"].pop("max_size", None)
    doc["store"]["reserve"] = reserve
    if max_bytes is not None:
        doc["store"]["max_size"] = max_bytes
    config.write_text(yaml.safe_dump(doc, sort_keys=False))


def grow(db: Path, nbytes: int) -> None:
    """Make the store larger than the smallest quota `check` accepts (1 MiB + the reserve)."""
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE test_ballast(x BLOB)")
    con.execute("INSERT INTO test_ballast VALUES (zeroblob(?))", (nbytes,))
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def pragma(db: Path, name: str) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        con.close()


async def test_the_store_quota_reached_holds_events_says_so_and_a_raised_quota_loses_nothing(
    harness: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "events.db"
    async with harness.rig(tmp_path, devices=2, poll=f"{POLL_S}s") as (_plant, rx, agent, load):
        await agent.start()  # a first run makes the schema; the quota then leaves a few pages
        await agent.started()
        await agent.stop()
        grow(db, 1024 * 1024)
        set_quota(agent.config, (pragma(db, 'page_count') + 6) * pragma(db, 'page_size') + RESERVE)
        await agent.start()
        await agent.started()
        load.start(4.0, seed=5)
        await agent.wait_for_log(FULL_LINE, timeout=40)
        assert "quota is full" in agent.this_run()
        await asyncio.sleep(3 * POLL_S)
        assert agent.alive(), agent.this_run()
        status = await agent.status()
        assert status["running"] and status["store"]["problem"], status
        assert "quota" in status["store"]["problem"], status
        held = status["service"]["recorder"]["store_errors"]
        assert held >= 2, status  # retried, not dropped

        # The operator raises the quota: a restart applies it. At the stop the last part of the
        # quota (the reserve) is opened, so what the recorder still held is committed.
        set_quota(agent.config, None)
        rc, took = await agent.stop()
        assert rc == 0 and took < harness.STOP_TIMEOUT_S, agent.this_run()[-3000:]
        assert "opened the store quota" in agent.this_run()
        assert "uncommitted observations" not in agent.this_run()
        await load.halt()
        verdict = await harness.drain_and_check(agent, rx, db, load)
        assert "store write failed" not in agent.this_run()
    assert verdict.ok, verdict.problems()
    assert verdict.made == verdict.committed > 0


async def test_sigterm_while_the_disk_is_full_commits_what_was_held_and_forwarding_goes_on(
    harness: ModuleType, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        db = disk / "events.db"
        rig = harness.rig(tmp_path, devices=2, poll=f"{POLL_S}s", store=db, reserve="1MiB")
        async with rig as (_plant, rx, agent, load):
            rx.fail(503)  # a backlog first: the upstream refuses
            await agent.start()
            await agent.started()
            load.start(2.0, seed=11)
            await harness.eventually(lambda: len(harness.checker.committed_keys(db)) >= 6, 20, "a backlog")
            assert fill(disk / "ballast") > 0
            await agent.wait_for_log(FULL_LINE, timeout=15)
            await agent.wait_for_log("released the store reserve", timeout=5)
            status = await agent.status()
            assert status["store"]["days_until_full"] == 0, status["store"]  # no room: says so
            backlog = set(harness.checker.committed_keys(db))
            rx.heal()  # forwarding goes on while the disk is full: the backlog goes out
            wanted = {harness.checker.cloud_id(harness.SITE, k) for k in backlog}
            await harness.eventually(lambda: wanted <= rx.distinct, 20, "the backlog sent while full")
            await asyncio.sleep(3 * POLL_S)  # observations are held meanwhile
            await load.halt()
            recorder = (await agent.status())["service"]["recorder"]
            assert recorder["store_problem"], recorder  # a batch held: cleared only by a commit

            rc, took = await agent.stop()  # SIGTERM with the disk still full
            run = agent.this_run()
            assert rc == 0 and took < harness.STOP_TIMEOUT_S, run[-3000:]
            assert "uncommitted observations" not in run and "Task was destroyed" not in run
            (disk / "ballast").unlink()
            verdict = await harness.drain_and_check(agent, rx, db, load)
    assert verdict.ok, verdict.problems()
    assert verdict.made == verdict.committed > 0


async def test_a_stop_that_cannot_commit_what_it_read_says_how_much_and_exits_non_zero(
    harness: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "events.db"
    async with harness.rig(tmp_path, devices=2, poll=f"{POLL_S}s") as (_plant, _rx, agent, load):
        await (await Store.open(db)).close()  # the schema, then ballast: a quota that fills at once
        grow(db, 1024 * 1024)
        set_quota(agent.config, (pragma(db, 'page_count') + 2) * pragma(db, 'page_size'), reserve=0)  # no reserve to open
        await agent.start()
        await agent.started()
        load.start(4.0, seed=9)
        await agent.wait_for_log(FULL_LINE, timeout=40)
        await asyncio.sleep(2 * POLL_S)
        await load.halt()
        rc, _took = await agent.stop()
        run = agent.this_run()
    assert rc == 75, run[-3000:]  # never exit 0 with observations dropped
    lost = re.search(r"stopped with (\d+) observations that could not be committed", run)
    assert lost is not None and int(lost.group(1)) > 0, run[-3000:]

"""A downgrade onto a store a newer edge-agent migrated is refused, with the reason and the way back.

An older edge-agent would misread tables and states it does not know (issue 34: the offline bundle
keeps the previous version for a rollback, and its install.sh refuses that rollback too).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agent.core.errors import StoreError
from agent.store.reader import Reader
from agent.store.schema import MIGRATIONS
from agent.store.store import Store

LATEST = MIGRATIONS[-1][0]


async def _store_from_the_future(path: Path) -> None:
    await (await Store.open(path)).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={LATEST + 1}")
    con.commit()
    con.close()


async def test_the_writer_refuses_a_newer_store_and_leaves_it_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _store_from_the_future(path)
    with pytest.raises(StoreError) as refused:
        await Store.open(path)
    text = str(refused.value)
    assert f"schema version {LATEST + 1} is newer than this edge-agent knows ({LATEST})" in text
    assert "run the newer version again" in text and "--restore-backup" in text
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == LATEST + 1
    con.close()


async def test_a_read_only_command_refuses_a_newer_store_too(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _store_from_the_future(path)
    with pytest.raises(StoreError, match=f"schema version {LATEST + 1} is newer"):
        await Reader.open(path)


async def test_a_store_at_this_version_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await (await Store.open(path)).close()
    await (await Store.open(path)).close()
    await (await Reader.open(path)).close()

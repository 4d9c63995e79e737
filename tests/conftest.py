"""Shared fixtures: real SQLite files in tmp_path, never :memory:."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.store.store import Store

DATA = Path(__file__).parent / "data"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "store.db")
    try:
        yield s
    finally:
        await s.close()

"""Shared fixtures: real SQLite files in tmp_path, never :memory:."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.store.store import Store

DATA = Path(__file__).parent / "data"
# Helper modules more than one test folder uses (not test modules): tests/shared/*.py.
sys.path.insert(0, str(Path(__file__).parent / "shared"))
# Reference writers the fast paths are held equal to (not product code): tests/oracles/*.py.
sys.path.insert(0, str(Path(__file__).parent / "oracles"))
# `check` reads the installed edge-agent.service by default: an installation on the machine
# running the tests must not change what they see (tests that want a unit pass --unit).
os.environ.setdefault("EDGE_AGENT_UNIT", "none")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "store.db")
    try:
        yield s
    finally:
        await s.close()

"""Shared fixtures: real SQLite files in tmp_path, never :memory:."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent.store.store import Store

# A shell that starts a command in the background (`cmd &`, nohup) has it ignore SIGINT, and the
# children inherit that: the tests of what Ctrl-C does would then see nothing happen. Each worker
# takes Ctrl-C back, as an interactive run has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


DATA = Path(__file__).parent / "data"
# Helper modules more than one test folder uses (not test modules): tests/shared/*.py.
sys.path.insert(0, str(Path(__file__).parent / "shared"))
# Reference writers the fast paths are held equal to (not product code): tests/oracles/*.py.
sys.path.insert(0, str(Path(__file__).parent / "oracles"))
# `check` reads the installed edge-agent.service by default: an installation on the machine
# running the tests must not change what they see (tests that want a unit pass --unit).
os.environ.setdefault("EDGE_AGENT_UNIT", "none")


@pytest.fixture(scope="session", autouse=True)
def runtime_directory() -> Iterator[None]:
    """The agents the tests run keep their live state in a runtime directory in memory
    (`agent.store.live_file`): one of this test process's own, removed at its end, so runs of
    the suite leave no files in /dev/shm."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or "RUNTIME_DIRECTORY" in os.environ:
        yield
        return
    own = Path(tempfile.mkdtemp(prefix="edge-agent-tests-", dir=shm))
    os.environ["RUNTIME_DIRECTORY"] = str(own)
    try:
        yield
    finally:
        os.environ.pop("RUNTIME_DIRECTORY", None)
        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "store.db")
    try:
        yield s
    finally:
        await s.close()

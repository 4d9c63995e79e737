"""Fixtures of the Sparkplug host scenarios: a private Mosquitto, the Node.js host, a store with
a Sparkplug upstream. The helpers are in sparkplug_scenario.py and sparkplug_parts.py (sibling
files with names no other test directory uses, so a whole-suite run imports the right ones)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparkplug_parts import Broker, Host
from sparkplug_scenario import GROUP, UP

from agent.store.store import Store


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def host(broker: Broker) -> Iterator[Host]:
    h = Host(broker.url, GROUP)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
async def sp_store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "store.db")
    await s.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    try:
        yield s
    finally:
        await s.close()

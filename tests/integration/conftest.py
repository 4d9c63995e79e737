"""Fixtures for the poller integration tests: real simulators on 127.0.0.1, real SQLite files.

The suite runs with ``--import-mode=importlib``, so helpers are fixtures. ``agent_for`` runs
the real pollers and the real recorder against a store in ``tmp_path`` and yields a ``View``, which reads
the store the way ``edge-agent report --json`` does; ``devices_of`` turns a plant into the
agent's device config through the real loader (the snippet the simulators emit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import loader as config
from agent.config.sources import Device
from agent.core.live import ServiceLive
from agent.service.recorder import Recorder
from agent.sources.pollers import run_pollers
from agent.store import report
from agent.store.store import Store
from devices.plant import Plant

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)


@pytest.fixture
def devices_of(tmp_path: Path) -> Callable[..., tuple[Device, ...]]:
    """Plant -> config file -> ``config.load`` -> devices; ``edit`` may change each device entry."""

    def make(plant: Plant, edit: Callable[[dict[str, Any]], None] | None = None) -> tuple[Device, ...]:
        entries = plant.device_configs()
        for entry in entries:
            if edit is not None:
                edit(entry)
        doc = {
            "site": "plant-1",
            "gateway": "gw-test",
            "store": {"path": str(tmp_path / "s.db")},
            "devices": entries,
        }
        path = tmp_path / f"config-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return config.load(path).devices

    return make


class View:
    """What the store holds, read through agent.store.report (as `report --json` shows it).

    It reads on the recorder's own connection, so every read takes the store's write lock:
    without it a read could land between two statements of an open batch transaction and see
    half of it (an event already inserted, its BootObserved not yet), which no separate reader
    (`edge-agent report`, another process) can ever see.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    async def summary(self) -> dict[str, int]:
        async with self.store._lock:
            return await report.summary(self.store.db)

    async def events(self) -> list[dict[str, Any]]:
        async with self.store._lock:
            return [e async for e in report.events(self.store.db)]

    async def keys(self) -> set[tuple[str, str, str]]:
        return {(e["source"], e["transitionId"], e["bootId"]) for e in await self.events()}

    async def arrivals(self) -> list[dict[str, Any]]:
        async with self.store._lock:
            return [a async for a in report.arrivals(self.store.db)]

    async def boots(self) -> list[dict[str, Any]]:
        async with self.store._lock:
            return [b async for b in report.boots(self.store.db)]

    async def anomalies(self, *, gaps: bool) -> list[dict[str, Any]]:
        async with self.store._lock:
            return [a async for a in report.anomalies(self.store.db, gaps=gaps)]


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait until ``check`` holds (a hang backstop, not a performance check)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached before the backstop")
        await asyncio.sleep(0.05)


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[None]]:
    return eventually


@pytest.fixture
def agent_for(tmp_path: Path) -> Callable[..., Any]:
    """``async with agent_for(devices) as view:`` runs pollers + recorder on ``tmp_path/store.db``."""

    @asynccontextmanager
    async def run(
        devices: tuple[Device, ...], db: str = "store.db", live: ServiceLive | None = None
    ) -> AsyncIterator[View]:
        store = await Store.open(tmp_path / db)
        recorder = Recorder(store)
        stop, stop_recorder = asyncio.Event(), asyncio.Event()
        rec = asyncio.create_task(recorder.run(stop_recorder), name="recorder")
        pollers = asyncio.create_task(run_pollers(devices, recorder, stop, live), name="pollers")
        try:
            yield View(store)
        finally:
            stop.set()
            await pollers
            stop_recorder.set()
            await rec
            await store.close()

    return run

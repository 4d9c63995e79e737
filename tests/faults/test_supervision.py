"""Supervision in a running service: an unexpected exception in a device connection, a forwarder
or the recorder is logged once with its traceback, counted, named by `status` and the task is
restarted; the service stays up and nothing is lost. A fatal store error ends the service (74).

The service runs in this process against a real Modbus simulator, a real HTTP receiver and a
real store; the unexpected exceptions are injected by wrapping one method so that it raises
once (a bug cannot be made for real on purpose).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent.config.loader import load
from agent.core.errors import StoreCorrupt
from agent.service.recorder import Recorder
from agent.service.run import Service
from agent.service.supervisor import FATAL_STORE_EXIT
from agent.sinks.http import HttpSink
from agent.sources.modbus.poller import ModbusSource
from agent.store.store import Store
from devices.controller import ChannelSpec, Controller
from devices.plant import Plant
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]


def raise_once(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, error: Exception, after: int = 0
) -> None:
    """`cls.name` raises `error` once, on its call number `after` + 1; otherwise the real method."""
    real: Callable[..., Any] = getattr(cls, name)
    calls = [0]

    async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == after + 1:
            raise error
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, wrapped)


async def test_a_failing_poller_forwarder_and_recorder_are_restarted_and_the_service_stays_up(
    harness: ModuleType,
    checker: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    raise_once(monkeypatch, ModbusSource, "poll", RuntimeError("injected poller bug"), after=3)
    raise_once(monkeypatch, HttpSink, "publish", KeyError("injected forwarder bug"))
    raise_once(monkeypatch, Recorder, "commit", TypeError("injected recorder bug"), after=1)
    db = tmp_path / "events.db"
    ctrl = Controller("PLC-00", [ChannelSpec("Trip")])
    async with Plant([ctrl], opcua_port=None) as plant, Receiver(keep=True) as rx:
        cfg_path = harness.write_config(
            tmp_path / "config.yaml",
            store=db,
            devices=plant.device_configs(),
            upstreams=[harness.http_upstream(rx.url)],
        )
        service = Service(load(cfg_path), status_interval_s=0.2)
        service.supervisor.backoff_initial = 0.05
        stop = asyncio.Event()
        load_ = harness.Load(plant)
        with caplog.at_level(logging.INFO):
            running = asyncio.create_task(service.run(stop))
            await asyncio.wait_for(service.ready.wait(), 30)
            for _ in range(4):
                await load_.transition("PLC-00", "Trip")
                await asyncio.sleep(0.3)

            def delivered() -> bool:
                keys = set(checker.committed_keys(db))
                return load_.made <= keys and {checker.cloud_id(harness.SITE, k) for k in keys} <= rx.distinct

            await harness.eventually(delivered, 30, "every transition stored and upstream")
            tasks = {t.name: t for t in service.live.tasks}
            failed = {n: (t.failures, t.restarts, t.last_error) for n, t in tasks.items() if t.failures}
            poller = f"poller[PLC-00 {service.cfg.devices[0].connections[0].receiver}]"
            assert failed == {
                poller: (1, 1, "RuntimeError: injected poller bug"),
                "forwarder[historian]": (1, 1, "KeyError: 'injected forwarder bug'"),
                "recorder": (1, 1, "TypeError: injected recorder bug"),
            }
            await asyncio.sleep(0.5)  # the live state is written every 0.2 s
            status = subprocess.run(
                [sys.executable, "-m", "agent", "status", "-c", str(cfg_path)],
                capture_output=True, text=True, timeout=30, cwd=ROOT,
            )  # fmt: skip
            stop.set()
            assert await asyncio.wait_for(running, 30) == 0
    shown = " ".join(status.stdout.split())  # causes are wrapped to the terminal's width
    assert (
        "task restarted after failing: recorder (state running, failures 1, restarts 1): TypeError" in shown
    )
    tracebacks = [r for r in caplog.records if r.exc_info and "failed unexpectedly" in r.getMessage()]
    named = sorted(r.getMessage().removeprefix("task ").split(" failed")[0] for r in tracebacks)
    assert named == sorted(failed)  # once per task, with its traceback
    accounting = checker.account(db, load_.made)
    assert accounting.lost_silently == [] and accounting.inside_gaps == 0


async def test_a_damaged_store_found_while_running_stops_the_service_with_exit_74(
    harness: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    raise_once(monkeypatch, Store, "record", StoreCorrupt("Store x: the file is damaged (injected)"))
    ctrl = Controller("PLC-00", [ChannelSpec("Trip")])
    async with Plant([ctrl], opcua_port=None) as plant:
        cfg_path = harness.write_config(
            tmp_path / "config.yaml",
            store=tmp_path / "events.db",
            devices=plant.device_configs(),
            upstreams=[],
        )
        service = Service(load(cfg_path), status_interval_s=0.2)
        with caplog.at_level(logging.INFO):
            code = await asyncio.wait_for(service.run(asyncio.Event()), 30)
    assert code == FATAL_STORE_EXIT == 74
    assert any("fatal store error in recorder" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.exc_info]

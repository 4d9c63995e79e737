"""A fault inside a reload never stops the service: it is logged, counted as `failed`, and the
service goes on waiting for the next reload or its stop."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

import agent.service.reload as reload_mod
from agent.core.live import ServiceLive


async def test_a_reload_that_raises_is_failed_and_the_next_one_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[bool] = []

    async def broken(service: Any, *, force: bool = False) -> str:
        calls.append(force)
        if len(calls) == 1:
            raise RuntimeError("a bug in the reload")
        return "applied"

    monkeypatch.setattr(reload_mod, "reload", broken)
    live = ServiceLive("2026-12-06T08:00:00.000Z", 1, "config.yaml")
    service = SimpleNamespace(
        live=live, now=lambda: "2026-12-06T08:00:01.000Z", cfg=SimpleNamespace(devices=())
    )
    reloads, stop = reload_mod.Reloads(), asyncio.Event()
    serving = asyncio.create_task(reloads.serve(service, stop))  # type: ignore[arg-type]
    reloads.ask()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if live.last_reload:
            break
    assert live.last_reload is not None and live.last_reload["result"] == "failed"
    assert live.last_reload["problems"] == ["RuntimeError: a bug in the reload"]
    assert not serving.done(), "the service goes on"
    reloads.ask(force=True)
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(calls) == 2:
            break
    assert calls == [False, True]
    stop.set()
    await asyncio.wait_for(serving, 5)

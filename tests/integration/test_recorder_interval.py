"""The recorder's commit interval: a lone observation is committed at once, observations that
arrive within `min_interval_s` of the last commit's start wait and go into one commit, and a
stop never waits for the interval. A real store in tmp_path; the interval is made long (60 s)
so that nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.core.decide import Outcome
from agent.core.snapshot import Observations, Positions, make_delivery
from agent.service.recorder import Recorder
from agent.store.store import Store

pytestmark = pytest.mark.timeout(30)


def observed(tid: int) -> Observations:
    delivery = make_delivery(
        device="PUMP-07",
        channel="Trip",
        transition_id=tid,
        boot_id="17",
        state="Trip",
        source_timestamp="2026-04-22T08:00:00.000Z",
        latched={},
        arrival_at="2026-04-22T08:00:00.100Z",
        receiver="modbus:test",
        live=True,
        raw={},
    )
    return Observations((delivery,), positions=Positions("PUMP-07", "17", {"Trip": tid}))


async def test_commits_begin_an_interval_apart_and_a_stop_does_not_wait(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    batches: list[list[str | None]] = []

    def committed(batch: Sequence[Observations], _outcomes: Sequence[Outcome]) -> None:
        batches.append([d.transition_id for o in batch for d in o.deliveries])

    recorder = Recorder(store, on_commit=committed, min_interval_s=60.0)
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    try:
        await recorder.submit(observed(1))
        async with asyncio.timeout(10):  # the first commit does not wait
            while not batches:
                await asyncio.sleep(0.01)
        for tid in (2, 3, 4):
            await recorder.submit(observed(tid))
        await asyncio.sleep(0.3)
        assert batches == [["1"]]  # within the interval: queued, not committed
        assert recorder.uncommitted() == 3
        stop.set()
        async with asyncio.timeout(10):  # far less than the interval
            await task
        assert batches == [["1"], ["2", "3", "4"]]
        assert recorder.uncommitted() == 0
    finally:
        stop.set()
        await task
        await store.close()


async def test_a_whole_batch_is_committed_without_waiting_for_the_interval(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    batches: list[list[str | None]] = []

    def committed(batch: Sequence[Observations], _outcomes: Sequence[Outcome]) -> None:
        batches.append([d.transition_id for o in batch for d in o.deliveries])

    recorder = Recorder(store, on_commit=committed, min_interval_s=60.0, max_batch=3)
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    try:
        await recorder.submit(observed(1))
        async with asyncio.timeout(10):
            while not batches:
                await asyncio.sleep(0.01)
        await recorder.submit(observed(2))
        await recorder.submit(observed(3))
        await asyncio.sleep(0.3)
        assert batches == [["1"]]  # two of three: waits for the interval
        await recorder.submit(observed(4))  # the third: a whole batch, committed at once
        async with asyncio.timeout(10):  # far less than the interval
            while len(batches) < 2:
                await asyncio.sleep(0.01)
        assert batches == [["1"], ["2", "3", "4"]]
        assert not stop.is_set()
    finally:
        stop.set()
        await task
        await store.close()

"""The supervisor's rules, on plain coroutines: restart after a bug, stop on a fatal store error,
no restart once stopping (the recorder gets one more run), and the per-task metric."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from agent.core.errors import StoreCorrupt, StoreFull
from agent.core.live import TaskLive
from agent.service.metrics import SnapshotCollector
from agent.service.supervisor import Fatal, Supervisor, is_fatal


def supervisor(stop: asyncio.Event) -> Supervisor:
    return Supervisor(Fatal(stop), backoff_initial=0.01, backoff_max=0.02, jitter=lambda: 0.0)


def failing(times: int, error: Exception, runs: list[int]) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        runs.append(1)
        if len(runs) <= times:
            raise error

    return start


async def test_a_task_that_fails_is_restarted_and_each_distinct_error_is_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop, runs = asyncio.Event(), list[int]()
    sup = supervisor(stop)
    with caplog.at_level(logging.ERROR):
        await sup.run("poller[X]", failing(3, RuntimeError("bug"), runs), stop)
    assert len(runs) == 4
    assert sup.tasks == [TaskLive("poller[X]", "stopped", 3, 3, "RuntimeError: bug")]
    assert [bool(r.exc_info) for r in caplog.records] == [True, False, False]
    assert sup.fatal.error is None and not stop.is_set()


async def test_a_damaged_store_is_fatal_and_stops_the_service_a_full_one_is_not() -> None:
    stop = asyncio.Event()
    sup = supervisor(stop)
    await sup.run("recorder", failing(1, StoreCorrupt("damaged"), []), stop)
    assert stop.is_set() and sup.fatal.task == "recorder" and isinstance(sup.fatal.error, StoreCorrupt)
    assert not is_fatal(StoreFull("full")) and not is_fatal(KeyError("k"))


@pytest.mark.parametrize(("again_at_stop", "runs_expected"), [(False, 1), (True, 2)])
async def test_once_stopping_only_a_task_marked_for_it_runs_once_more(
    again_at_stop: bool, runs_expected: int
) -> None:
    stop, runs = asyncio.Event(), list[int]()
    stop.set()
    sup = supervisor(stop)
    await sup.run("t", failing(5, RuntimeError("bug"), runs), stop, again_at_stop=again_at_stop)
    assert len(runs) == runs_expected


def test_failures_and_restarts_are_a_metric_per_task() -> None:
    collector = SnapshotCollector()
    collector.snapshot = {"tasks": [{"name": "forwarder[central]", "failures": 2, "restarts": 1}]}
    samples = {
        (s.name, s.labels.get("task")): s.value for family in collector.collect() for s in family.samples
    }
    assert samples[("edge_agent_task_failures_total", "forwarder[central]")] == 2
    assert samples[("edge_agent_task_restarts_total", "forwarder[central]")] == 1

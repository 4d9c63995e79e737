"""Crashes of a real forwarding process (SIGKILL) at the two moments that matter.

1. After publishing and before marking sent: the receiver took the events but
   its answer never reached the agent. After restart the same events go out
   again, same (source, id), `attempt` 2, and the receiver counts them as
   redeliveries of events it already has.
2. After the canonical commit and before any publish: nothing is lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.store.store import Store
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(60)

SCRIPT = Path(__file__).with_name("forwarder_process.py")
ROOT = Path(__file__).resolve().parents[2]


def deliveries(count: int) -> list[Delivery]:
    out = []
    for n in range(1, count + 1):
        obj = {"source": "PUMP-07/Trip", "transitionId": n, "bootId": "B17", "payload": {"n": n}}
        got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(got, Delivery)
        out.append(got)
    return out


@asynccontextmanager
async def forwarder_process(db: Path, url: str) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), str(db), url, stdout=asyncio.subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        assert (await asyncio.wait_for(proc.stdout.readline(), 20)).strip() == b"READY"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await cond():
            await asyncio.sleep(0.02)


async def states(db: Path) -> dict[str, tuple[int, int]]:
    """state -> (rows, attempts), read through a fresh connection."""
    store = await Store.open(db, check=False)
    try:
        rows = await store.db.execute_fetchall(
            "SELECT state, count(*), sum(attempts) FROM outbox GROUP BY state"
        )
        return {r[0]: (r[1], r[2]) for r in rows}
    finally:
        await store.close()


async def test_kill_between_publish_and_mark_resends_with_attempt_2_and_the_same_id(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    async with Receiver() as rx:
        rx.stall(None)  # take the request, hold the answer: published, not acknowledged
        async with forwarder_process(db, rx.url) as proc:
            store = await Store.open(db)
            try:
                await store.record(deliveries(20))
            finally:
                await store.close()

            async def published() -> bool:
                return rx.event_count >= 21

            await eventually(published)
            proc.send_signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
        # The receiver has every event once; the store still has every row pending, attempt 1 used.
        assert len(rx.distinct) == 21 and rx.redeliveries == 0
        assert await states(db) == {"pending": (21, 21)}
        first = {(e["source"], e["id"]): e for e in rx.events}
        assert {e["attempt"] for e in first.values()} == {1}

        rx.release()
        async with forwarder_process(db, rx.url):

            async def delivered() -> bool:
                return (await states(db)).get("delivered", (0, 0))[0] == 21

            await eventually(delivered)
        assert await states(db) == {"delivered": (21, 42)}
    again = rx.events[21:]
    assert {(e["source"], e["id"]) for e in again} == set(first)  # the same events, same ids
    assert {e["attempt"] for e in again} == {2} and all(e["replayed"] for e in again)
    assert len(rx.distinct) == 21 and rx.redeliveries == 21  # the receiver can tell they are the same


async def test_kill_after_commit_and_before_any_publish_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    async with Receiver() as rx:
        url = rx.url
        await rx.go_away(3600)  # nothing listens: no publish can succeed
        async with forwarder_process(db, url) as proc:
            store = await Store.open(db)
            try:
                await store.record(deliveries(30))
            finally:
                await store.close()

            async def failed_a_few_times() -> bool:  # every claim of the 31 rows adds 31 attempts
                return (await states(db)).get("pending", (0, 0))[1] >= 2 * 31

            await eventually(failed_a_few_times)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert (await states(db))["pending"][0] == 31
        assert rx.event_count == 0
        if rx._away is not None:
            rx._away.cancel()
        await rx.start()
        async with forwarder_process(db, url):

            async def delivered() -> bool:
                return (await states(db)).get("delivered", (0, 0))[0] == 31

            await eventually(delivered)
        assert len(rx.distinct) == 31 and rx.redeliveries == 0
        assert [e["id"] for e in rx.events if e["type"] == "io.edgeagent.transition"] == [
            f"B17:{n}" for n in range(1, 31)
        ]

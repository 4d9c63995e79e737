"""Forwarder -> HTTP sink -> the recording receiver, on a real SQLite file and real sockets.

Outage and recovery, poison events, Retry-After, a bearer token, memory while
draining a large backlog, and counts kept apart.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.cli.main import cli
from agent.config.upstreams import Backoff, HttpUpstream
from agent.core.contract import Delivery
from agent.core.intake import parse_delivery
from agent.service.forwarder import Forwarder
from agent.service.upstream_sink import build_sink
from agent.store import report
from agent.store.store import Store
from devices.upstream import Receiver

pytestmark = pytest.mark.timeout(60)

SITE, GW, UP = "plant-1", "gw-test", "hist"
SOURCES = ("PUMP-07/Trip", "PUMP-07/Overload", "COMP-02/OverTemp")


def deliveries(first: int, count: int, boot: str = "B17") -> list[Delivery]:
    """`count` transitions spread over SOURCES, transition ids first..first+count-1 in recording order."""
    out = []
    for n in range(first, first + count):
        obj = {"source": SOURCES[n % len(SOURCES)], "transitionId": n, "bootId": boot, "payload": {"n": n}}
        got = parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")
        assert isinstance(got, Delivery)
        out.append(got)
    return out


def settings(url: str, **kw: Any) -> HttpUpstream:
    base: dict[str, Any] = dict(
        batch_size=50, read_size=100, backoff=Backoff(0.05, 0.2), request_timeout_s=5.0
    )
    return HttpUpstream(UP, url, **{**base, **kw})


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await cond():
            await asyncio.sleep(0.02)


class Running:
    """A forwarder task for the duration of a `with` block (stopped by its event, never cancelled)."""

    def __init__(self, store: Store, up: HttpUpstream, **kw: Any) -> None:
        self.sink = build_sink(up, site=SITE, gateway=GW)
        self.fwd = Forwarder(store, self.sink, up, site=SITE, gateway=GW, idle_poll_s=0.05, **kw)
        self.stop = asyncio.Event()

    async def __aenter__(self) -> Forwarder:
        self.task = asyncio.create_task(self.fwd.run(self.stop, drain_s=1.0), name="forwarder[test]")
        await asyncio.wait_for(self.fwd.started.wait(), 10)
        return self.fwd

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await self.task
        await self.sink.close()


async def outbox_states(store: Store) -> dict[str, int]:
    rows = await store.db.execute_fetchall("SELECT state, count(*) FROM outbox GROUP BY state")
    return {r[0]: r[1] for r in rows}


def transitions(rx: Receiver) -> list[dict[str, Any]]:
    return [e for e in rx.events if e["type"] == "io.edgeagent.transition"]


def first_seen_order(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    seen: set[tuple[str, str]] = set()
    order: dict[str, list[str]] = {}
    for e in events:
        if (e["source"], e["id"]) not in seen:
            seen.add((e["source"], e["id"]))
            order.setdefault(e["source"], []).append(e["id"])
    return order


async def test_outage_then_reconnect_drains_the_backlog_in_order_with_stable_ids(store: Store) -> None:
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    async with Receiver() as rx:
        await store.record(deliveries(1, 30))
        await rx.go_away(1.0)  # the upstream is down: connection refused
        async with Running(store, settings(rx.url)) as fwd:
            for start in range(31, 331, 50):  # events keep coming during the outage
                await store.record(deliveries(start, 50))
                await store.record(deliveries(start, 5))  # duplicates: arrivals, not events
                await asyncio.sleep(0.05)
            await rx.back()
            await store.record(deliveries(331, 60))  # recorded while the backlog drains
            canonical = (await store.db.execute_fetchall("SELECT count(*) FROM events"))[0][0]

            async def all_there() -> bool:
                return len({(e["source"], e["id"]) for e in transitions(rx)}) == canonical

            await eventually(all_there)
            assert fwd.state.up is True and fwd.state.failures == 0
        assert await outbox_states(store) == {"delivered": canonical + 2}  # + BootObserved of 2 devices

        # Every id is the contract's, each one once in the committed set, in order per source.
        expected: dict[str, list[str]] = {}
        for n in range(1, 391):
            src = SOURCES[n % len(SOURCES)]
            expected.setdefault(f"{SITE}/{src}", []).append(f"B17:{n}")
        assert first_seen_order(transitions(rx)) == expected
        # Events that waited through the outage say so; the ones recorded after it came back did not wait.
        by_id = {e["id"]: e for e in transitions(rx)}
        assert by_id["B17:100"]["replayed"] is True
        assert all(e["gateway"] == GW and e["bootid"] == "B17" for e in by_id.values())
        assert min(e["attempt"] for e in rx.events if e["id"] == "B17:1") >= 2  # it waited through the outage
        assert all(len(r.headers.get("Idempotency-Key", "")) == 64 for r in rx.requests if r.status)

        # Counts kept apart: source events, arrivals, delivery attempts.
        summary = await report.summary(store.db)
        counts = {c.upstream: c for c in await store.outbox.counts()}[UP]
        assert summary["source_events"] == canonical == 390
        assert summary["arrivals"] == 390 + 30
        assert summary["delivery_attempts"] == counts.attempts > counts.delivered == canonical + 2
        assert counts.pending == counts.rejected == 0


async def test_a_poison_event_is_dead_lettered_the_rest_flows_and_outbox_retry_resends_it(
    store: Store, tmp_path: Path
) -> None:
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    async with Receiver() as rx:
        rx.poison(f"{SITE}/PUMP-07/Overload", "B17:40")
        await store.record(deliveries(1, 120))
        async with Running(store, settings(rx.url)) as fwd:

            async def settled() -> bool:
                return await outbox_states(store) == {"delivered": 121, "rejected": 1}

            await eventually(settled)
            assert fwd.state.rejected == 1
        assert len(rx.distinct) == 121 and ("B17:40" not in {e["id"] for e in rx.events})
        assert first_seen_order(transitions(rx))[f"{SITE}/PUMP-07/Overload"][-1] == "B17:118"  # not blocked

        runner = CliRunner()
        db = str(tmp_path / "store.db")
        shown = await asyncio.to_thread(runner.invoke, cli, ["--db", db, "outbox", "--json"])
        assert shown.exit_code == 0, shown.output
        row = json.loads(shown.output.splitlines()[0])
        assert (row["upstream"], row["pending"], row["delivered"], row["rejected"]) == (UP, 0, 121, 1)
        assert "HTTP 400" in row["last_rejection"]

        rx.cure(f"{SITE}/PUMP-07/Overload", "B17:40")
        again = await asyncio.to_thread(runner.invoke, cli, ["--db", db, "outbox", "retry", "--upstream", UP])
        assert again.exit_code == 0 and "1 dead letter" in again.output, again.output
        async with Running(store, settings(rx.url)):

            async def delivered() -> bool:
                return await outbox_states(store) == {"delivered": 122}

            await eventually(delivered)
        resent = [e for e in rx.events if e["id"] == "B17:40"]
        assert len(resent) == 1 and resent[0]["attempt"] >= 2 and resent[0]["replayed"] is True


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(429, id="429 Too Many Requests with Retry-After is honoured"),
        pytest.param(503, id="503 Service Unavailable with Retry-After is honoured"),
    ],
)
async def test_retry_after_is_honoured(store: Store, status: int) -> None:
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    async with Receiver() as rx:
        rx.fail(status, count=1, retry_after="1")
        await store.record(deliveries(1, 10))
        async with Running(store, settings(rx.url)):

            async def delivered() -> bool:
                return await outbox_states(store) == {"delivered": 12}

            await eventually(delivered)
        assert [r.status for r in rx.requests] == [status, 200]
        waited = rx.requests[1].received_at - rx.requests[0].received_at
        assert waited >= 0.9  # our own backoff would have waited 0.05 s


async def test_a_bearer_token_is_read_from_its_file(store: Store, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    async with Receiver(token="s3cret") as rx:
        await store.record(deliveries(1, 5))
        async with Running(store, settings(rx.url, token_file=str(tmp_path / "token"))):

            async def delivered() -> bool:
                return await outbox_states(store) == {"delivered": 7}

            await eventually(delivered)
        assert all(r.headers["Authorization"] == "Bearer s3cret" for r in rx.requests)


async def test_memory_stays_flat_while_a_large_backlog_drains(store: Store) -> None:
    total = 30_000
    await store.register_upstreams([(UP, "none")], "2026-04-22T08:00:00.000Z")
    for start in range(1, total + 1, 5000):
        await store.record(deliveries(start, 5000))
    # The receiver runs as its own process, so only the forwarder's allocations are traced here.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devices.upstream", "--no-keep", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        ready = json.loads((await proc.stdout.readline()).decode().removeprefix("READY "))
        gc.collect()
        tracemalloc.start()
        try:
            async with Running(store, settings(ready["url"], batch_size=500, read_size=1000)):

                async def drained() -> bool:
                    return (await outbox_states(store)).get("pending", 0) == 0

                await eventually(drained, timeout=50)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        proc.terminate()
        await proc.wait()
    # The whole backlog as CloudEvents is ~10 MB of bodies alone (several times that as objects);
    # one read batch is a few hundred kB.
    assert peak < 6 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB while draining {total} events"
    assert await outbox_states(store) == {"delivered": total + 2}

"""Polling slots (`agent.sources.schedule.SlotBook`, issue 35): the connections of one interval are
dealt evenly onto its slots (about one per 10 ms), so at most connections / slots + 1 requests of
an interval start at once; every interval's slots lie on one grid; the same start order gives the
same slots; a slot given back is taken again first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sources.schedule import BOOK, MAX_SLOTS, SlotBook, slots_of


@given(
    keys=st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=300),
    period=st.sampled_from([0.0001, 0.05, 0.1, 0.25, 1.0, 2.5, 30.0]),
)
def test_any_start_order_is_dealt_evenly_and_the_phases_lie_in_the_interval(
    keys: list[str], period: float
) -> None:
    book = SlotBook()
    taken = [book.take(period, k) for k in keys]
    counts = book.counts(period)
    slots = len(counts)
    assert slots == slots_of(period) and 1 <= slots <= MAX_SLOTS
    assert sum(counts) == len(keys)
    assert max(counts) - min(counts) <= 1
    assert max(counts) <= len(keys) / slots + 1  # the bound on requests started at once
    for s in taken:
        assert 0 <= s.phase < period and s.phase == pytest.approx(s.index * period / slots)


def test_the_same_start_order_gets_the_same_slots() -> None:
    keys = [f"PLC-{i:03d} 10.0.0.{i}:502" for i in range(57)]
    book = SlotBook()
    first = [book.take(0.1, k).index for k in keys]
    again = SlotBook()
    assert [again.take(0.1, k).index for k in keys] == first


def test_slots_are_about_10_ms_wide_on_one_grid_for_every_interval() -> None:
    assert (slots_of(0.1), slots_of(1.0), slots_of(0.25), slots_of(0.0001), slots_of(60.0)) == (
        10,
        100,
        25,
        1,
        1000,
    )
    book = SlotBook()
    # 1,000 PLCs at 1 Hz and 200 at 10 Hz: at most 10 + 20 requests start on any instant of the grid
    slow = [book.take(1.0, f"s{i}") for i in range(1000)]
    fast = [book.take(0.1, f"f{i}") for i in range(200)]
    at: dict[int, int] = {}
    for s in slow:
        at[round(s.phase * 1000)] = at.get(round(s.phase * 1000), 0) + 1
    for f in fast:
        for k in range(10):  # a 10 Hz slot ticks ten times a second
            ms = round((f.phase + k * 0.1) * 1000)
            at[ms] = at.get(ms, 0) + 1
    assert set(at) == {10 * i for i in range(100)} and max(at.values()) == 30


def test_intervals_are_dealt_apart_and_a_slot_given_back_is_taken_again() -> None:
    book = SlotBook(slot_s=0.025)
    fast = [book.take(0.1, f"f{i}") for i in range(8)]
    slow = book.take(1.0, "s0")
    assert book.counts(0.1) == [2, 2, 2, 2] and sum(book.counts(1.0)) == 1
    book.give_back(fast[5])
    assert book.take(0.1, "new").index == fast[5].index
    book.give_back(slow)
    book.give_back(slow)  # twice: never below zero
    assert book.counts(1.0) == [0] * 40


def test_a_device_stopped_gives_its_connections_slots_back(tmp_path: Path) -> None:
    from agent.config.loader import load
    from agent.sources.pollers import run_device

    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        "gateway: gw\nsite: s\nstore: {path: " + str(tmp_path / "s.db") + "}\n"
        "devices:\n  - name: PLC-1\n    poll: 250ms\n    boot_id: {register: 0, type: uint32}\n"
        "    channels:\n      Trip:\n        transition_id: {register: 2, type: uint32}\n"
        "        state: {register: 4, type: uint16}\n"
        "    connections:\n      - modbus: {host: 127.0.0.1, port: 1, timeout: 100ms}\n"
        "      - modbus: {host: 127.0.0.1, port: 2, timeout: 100ms}\n"
    )
    device = load(cfg).devices[0]
    before = BOOK.counts(device.poll)

    class Sink:
        async def submit(self, obs: object) -> None:
            pass

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(run_device(device, Sink(), stop))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert sum(BOOK.counts(device.poll)) == sum(before) + 2  # both connections hold a slot
        stop.set()
        await task

    asyncio.run(go())
    assert BOOK.counts(device.poll) == before

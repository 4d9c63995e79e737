"""Polling slots (`agent.sources.schedule.SlotBook`, issue 35): an interval's slots (about one per
10 ms) are filled up to SLOT_FILL connections each before another opens, and they open in an order
that keeps the open ones spread over the interval; so a few connections tick together (one
event-loop pass) and many are spread, at most SLOT_FILL requests of an interval start at once
while it has an empty slot; every interval's slots lie on one grid; the same start order gives
the same slots; a slot given back is taken again first."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sources.schedule import BOOK, MAX_SLOTS, SLOT_FILL, SlotBook, slots_of, spread_order


@given(
    n=st.integers(min_value=0, max_value=700),
    period=st.sampled_from([0.0001, 0.05, 0.1, 0.25, 1.0, 2.5, 30.0]),
    fill=st.sampled_from([1, 3, SLOT_FILL]),
)
def test_slots_fill_before_the_next_opens_and_the_phases_lie_in_the_interval(
    n: int, period: float, fill: int
) -> None:
    book = SlotBook(fill=fill)
    taken = [book.take(period) for _ in range(n)]
    counts = book.counts(period)
    slots = len(counts)
    assert slots == slots_of(period) and 1 <= slots <= MAX_SLOTS
    assert sum(counts) == n
    if n <= fill * slots:  # room left: as few slots as hold them, none over `fill`
        assert max(counts, default=0) <= fill
        assert sum(1 for c in counts if c) == math.ceil(n / fill)
        assert sum(1 for c in counts if 0 < c < fill) <= 1
    else:  # every slot full: the rest dealt evenly, so at most n / slots + 1 start at once
        assert min(counts) >= fill and max(counts) - min(counts) <= 1
        assert max(counts) <= n / slots + 1
    for s in taken:
        assert 0 <= s.phase < period and s.phase == pytest.approx(s.index * period / slots)


@given(n=st.integers(min_value=1, max_value=1000), first=st.integers(min_value=0, max_value=999))
def test_the_slots_opened_first_lie_spread_over_the_interval(n: int, first: int) -> None:
    order = spread_order(n, first % n)
    assert sorted(order) == list(range(n)) and order[0] == first % n
    for k in range(2, min(n, 64) + 1):  # any leading run: no gap between open slots over 3 n / k
        pos = sorted(order[:k])
        gaps = [(pos[(i + 1) % k] - pos[i]) % n or n for i in range(k)]
        assert max(gaps) <= 3 * n / k + 1


def test_the_same_start_order_gets_the_same_slots() -> None:
    book = SlotBook()
    first = [book.take(0.1).index for _ in range(57)] + [book.take(1.0).index for _ in range(57)]
    again = SlotBook()
    assert [again.take(0.1).index for _ in range(57)] + [again.take(1.0).index for _ in range(57)] == first


def test_a_few_connections_tick_together_and_two_hundred_spread_over_ten_slots() -> None:
    book = SlotBook()
    few = {book.take(0.1).index for _ in range(SLOT_FILL)}
    assert len(few) == 1  # 20 OPC UA connections at 10 Hz: one pass of the event loop per tick
    for _ in range(200 - SLOT_FILL):
        book.take(0.1)
    assert book.counts(0.1) == [SLOT_FILL] * 10


def test_slots_are_about_10_ms_wide_on_one_grid_for_every_interval() -> None:
    assert (slots_of(0.1), slots_of(1.0), slots_of(0.25), slots_of(0.0001), slots_of(60.0)) == (
        10,
        100,
        25,
        1,
        1000,
    )
    book = SlotBook()
    # 1,000 PLCs at 1 Hz and 200 at 10 Hz: at most two full slots start on any instant of the grid
    slow = [book.take(1.0) for _ in range(1000)]
    fast = [book.take(0.1) for _ in range(200)]
    at: dict[int, int] = {}
    for s in slow:
        at[round(s.phase * 1000)] = at.get(round(s.phase * 1000), 0) + 1
    for f in fast:
        for k in range(10):  # a 10 Hz slot ticks ten times a second
            ms = round((f.phase + k * 0.1) * 1000)
            at[ms] = at.get(ms, 0) + 1
    assert set(at) <= {10 * i for i in range(100)} and max(at.values()) <= 2 * SLOT_FILL
    assert len({s.index for s in slow}) == 1000 // SLOT_FILL  # 50 of the 100 slots open


def test_intervals_are_dealt_apart_and_a_slot_given_back_is_taken_again() -> None:
    book = SlotBook(slot_s=0.025, fill=2)
    fast = [book.take(0.1) for _ in range(8)]
    slow = book.take(1.0)
    assert book.counts(0.1) == [2, 2, 2, 2] and sum(book.counts(1.0)) == 1
    book.give_back(fast[5])
    assert book.take(0.1).index == fast[5].index
    book.give_back(fast[0])
    book.give_back(fast[1])  # a slot emptied: the first empty in the opening order opens again
    assert book.take(0.1).index == fast[0].index
    book.give_back(slow)
    book.give_back(slow)  # twice: never below zero
    assert book.counts(1.0) == [0] * 40


@pytest.mark.parametrize("bad", [{"slot_s": 0.0}, {"fill": 0}])
def test_a_book_refuses_slots_of_no_width_or_no_room(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SlotBook(**bad)  # type: ignore[arg-type]


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


def test_the_ticks_of_a_slot_share_one_timer_and_none_wakes_early() -> None:
    from agent.sources.schedule import Pacer, next_tick

    async def go() -> None:
        loop = asyncio.get_running_loop()
        now = loop.time() + 0.005  # every instant at least 5 ms ahead: timers, never a plain yield
        # 20 connections of one slot and 5 of the next: their instants computed apart, at other
        # moments, as each poller does after its own read
        same = [Pacer().tick(next_tick(0.1, 0.03, now + i * 1e-5), asyncio.Event()) for i in range(20)]
        other = [Pacer().tick(next_tick(0.1, 0.04, now), asyncio.Event()) for _ in range(5)]
        due_same, due_other = next_tick(0.1, 0.03, now), next_tick(0.1, 0.04, now)
        timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert len(timers) == 2  # one per instant, not one per connection
        woken: dict[str, float] = {}
        ticks = [t for t in same + other if t is not None]
        for t in ticks[:20]:
            t.add_done_callback(lambda _f: woken.setdefault("same", loop.time()))
        for t in ticks[20:]:
            t.add_done_callback(lambda _f: woken.setdefault("other", loop.time()))
        await asyncio.gather(*ticks)
        assert woken["same"] >= due_same and woken["other"] >= due_other

    asyncio.run(go())
    asyncio.run(go())  # a second event loop gets timers of its own


def test_a_tick_ends_at_stop_and_its_slot_timer_still_wakes_the_others() -> None:
    from agent.sources.schedule import Pacer, next_tick

    async def go() -> None:
        loop = asyncio.get_running_loop()
        when = next_tick(0.05, 0.0, loop.time() + 0.01)  # at least 10 ms ahead
        stop = asyncio.Event()
        first, second = Pacer(), Pacer()
        t1, t2 = first.tick(when, stop), second.tick(when, asyncio.Event())
        assert t1 is not None and t2 is not None
        stop.set()
        await asyncio.wait_for(t1, 0.04)  # ended by stop, before its instant
        assert not t2.done() and first.tick(when, stop) is None  # stop stays set: no tick
        await t2
        assert loop.time() >= when
        first.drop()
        second.drop()
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        soon = Pacer().tick(loop.time() + 0.0001, asyncio.Event())  # under 1 ms: one yield, no timer
        assert soon is not None and len(loop._scheduled) == before  # type: ignore[attr-defined]
        await soon

    asyncio.run(go())

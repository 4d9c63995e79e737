"""A connection's ticks (`agent.sources.schedule.Pacer`): an event set ends the tick under way, a
set event gives no tick at all, and dropping the waiters (the connection closed) ends nothing."""

from __future__ import annotations

import asyncio

from agent.sources.schedule import Pacer


def _in(seconds: float) -> float:
    """The instant `seconds` from now on the event loop's clock (what a tick is given)."""
    return asyncio.get_running_loop().time() + seconds


async def test_setting_an_event_ends_the_tick_under_way_and_then_no_tick_is_given() -> None:
    pacer, stop, lost = Pacer(), asyncio.Event(), asyncio.Event()
    tick = pacer.tick(_in(3600.0), stop, lost)
    assert tick is not None
    await asyncio.sleep(0)
    lost.set()
    await asyncio.wait_for(tick, 5)  # woken by the event, not by the hour's timer
    assert pacer.tick(_in(3600.0), stop, lost) is None
    pacer.drop()


async def test_a_short_delay_yields_once_and_new_events_get_new_waiters() -> None:
    pacer, stop = Pacer(), asyncio.Event()
    tick = pacer.tick(_in(0.0), stop)
    assert tick is not None and not tick.done()
    await asyncio.wait_for(tick, 5)
    stop_of_next_run = asyncio.Event()
    tick = pacer.tick(_in(3600.0), stop_of_next_run)  # the old event's waiter is dropped
    assert tick is not None
    stop.set()
    await asyncio.sleep(0.01)
    assert not tick.done()
    stop_of_next_run.set()
    await asyncio.wait_for(tick, 5)
    pacer.drop()


async def test_dropping_the_waiters_does_not_end_a_tick() -> None:
    pacer, stop = Pacer(), asyncio.Event()
    pacer.tick(_in(3600.0), stop)
    pacer.drop()
    tick = pacer.tick(_in(3600.0), stop)  # waiters again; the dropped ones' callbacks run meanwhile
    assert tick is not None
    await asyncio.sleep(0.01)
    assert not tick.done()
    pacer.drop()
    assert not tick.done()
    await asyncio.sleep(0.01)
    assert not tick.done()
    tick.cancel()

"""The first read of a window channel after the agent starts, judged against the store (issue 28).

Table: what the store holds for the channel (the latest source time of its events), what the
first read shows (state, change time), and whether that read is delivered. Delivered means a
new event when its change time is newer, a ``duplicate`` when it is the same; an older change
time is a baseline (the store already holds something later) and says so in a note.
"""

from __future__ import annotations

import pytest

from agent.core.snapshot import ChannelRead, Snapshot
from agent.core.window import WindowChanges

AT = "2026-04-22T09:00:00.000Z"
T1, T2, T3 = "2026-04-22T08:01:00.000Z", "2026-04-22T08:02:00.000Z", "2026-04-22T08:03:00.000Z"


def read(state: str, changed: str | None) -> tuple[Snapshot, ChannelRead]:
    ch = ChannelRead("Door", None, state=state, source_timestamp=changed, window_ms=3_600_000)
    return Snapshot("PUMP-07", "modbus:test", AT, "17", (ch,)), ch


@pytest.mark.parametrize(
    ("recorded", "changed", "delivered", "noted"),
    [
        pytest.param(None, T2, True, False, id="nothing stored: the change time makes the key"),
        pytest.param(T2, T3, True, False, id="changed while the agent was away: a new event"),
        pytest.param(T2, T2, True, False, id="the same change time: a re-read (duplicate)"),
        pytest.param(
            T2, "2026-04-22T10:02:00.000+02:00", True, False, id="the same instant in another offset"
        ),
        pytest.param(T2, T1, False, True, id="older than the store's last event: a baseline"),
        pytest.param(T2, None, False, False, id="no change time: a baseline, as always"),
    ],
)
def test_the_first_read_after_a_start(
    recorded: str | None, changed: str | None, delivered: bool, noted: bool
) -> None:
    windows = WindowChanges("PUMP-07", recorded={"Door": recorded} if recorded else {})
    notes: list[str] = []
    snap, ch = read("Open", changed)
    assert (windows.observe(snap, ch, notes) is not None) is delivered
    assert bool(notes) is noted
    # the next change is judged against the state just read, whatever the first read was
    snap, ch = read("Closed", changed)
    assert windows.observe(snap, ch, notes) is not None


def test_only_the_first_read_is_judged_against_the_store() -> None:
    windows = WindowChanges("PUMP-07", recorded={"Door": T3})
    snap, ch = read("Open", T1)
    assert windows.observe(snap, ch, []) is None  # baseline
    snap, ch = read("Closed", T2)  # a change this connection saw: delivered, whatever the store holds
    assert windows.observe(snap, ch, []) is not None

"""Window keys (contract section 8) in the core: the key, the change detection, the flag."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.basis import WINDOW_KEY, IdentityBasis, basis_flags
from agent.core.contract import Decision
from agent.core.decide import classify
from agent.core.snapshot import ChannelRead, Snapshot
from agent.core.timestamps import format_timestamp
from agent.core.tracker import DeviceTracker
from agent.core.window import state_text, window_index, window_key

MIN = 60_000


@pytest.mark.parametrize(
    ("state", "observed", "window_ms", "key"),
    [
        pytest.param(
            "Trip", "1970-01-01T00:00:59.999Z", MIN, "w:Trip:0", id="the last ms of the first window"
        ),
        pytest.param("Trip", "1970-01-01T00:01:00.000Z", MIN, "w:Trip:1", id="a boundary opens the next"),
        pytest.param("On", "2026-04-22T08:00:12.120Z", MIN, "w:On:29614080", id="minutes since the epoch"),
        pytest.param(
            "On", "2026-04-22T10:00:12.120+02:00", MIN, "w:On:29614080", id="an offset is the instant"
        ),
        pytest.param(1, "2026-04-22T08:00:12.120Z", 3_600_000, "w:1:493568", id="a raw number in decimal"),
        pytest.param("1", "2026-04-22T08:00:12.120Z", 3_600_000, "w:1:493568", id="as its text (91 == '91')"),
        pytest.param("a:b", "1970-01-01T00:00:00.500Z", 1000, "w:a:b:0", id="a colon in a state name"),
        pytest.param(True, "1970-01-01T00:00:00.500Z", 1000, "w:true:0", id="a boolean as JSON"),
        pytest.param("Trip", "1969-12-31T23:59:59.999Z", 1000, "w:Trip:-1", id="before 1970 rounds down"),
    ],
)
def test_the_window_key_is_w_state_and_the_floor_of_observed_over_window(
    state: Any, observed: str, window_ms: int, key: str
) -> None:
    assert window_key(state, observed, window_ms) == key


def test_a_window_of_zero_has_no_index() -> None:
    with pytest.raises(ValueError, match="longer than zero"):
        window_index("2026-04-22T08:00:12.120Z", 0)


@given(
    ms=st.integers(min_value=-62_000_000_000_000, max_value=253_000_000_000_000),
    window=st.integers(min_value=1, max_value=400 * 86_400_000),
)
def test_the_index_is_exact_integer_floor_division_of_epoch_milliseconds(ms: int, window: int) -> None:
    from datetime import UTC, datetime, timedelta

    text = format_timestamp(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms))
    assert window_index(text, window) == ms // window


@pytest.mark.parametrize(
    ("state", "text"),
    [("Trip", "Trip"), (7, "7"), (2.5, "2.5"), (None, "null"), (False, "false")],
)
def test_a_state_stands_in_the_key_as_its_text(state: Any, text: str) -> None:
    assert state_text(state) == text


# --- change detection of window channels ---------------------------------------------------------

Read = tuple[str | None, Any, str | None, str]  # boot id, state (None: read failed), change time, read time


def snap(boot: str | None, state: Any, ts: str | None, at: str) -> Snapshot:
    ch = ChannelRead(
        "Coil",
        None,
        state=state,
        source_timestamp=ts,
        error="exception 2" if state is None else None,
        window_ms=MIN,
    )
    return Snapshot("PUMP-07", "modbus:test", at, boot, (ch,), boot_where={"register": 0})


T0 = "2026-04-22T08:00:10.000Z"
T1 = "2026-04-22T08:00:20.000Z"
T2 = "2026-04-22T08:00:30.000Z"
T3 = "2026-04-22T08:01:05.000Z"


@pytest.mark.parametrize(
    ("reads", "delivered"),
    [
        pytest.param(
            [("B1", "Off", None, T0), ("B1", "On", None, T1)],
            [("w:On:29614080", "B1", None)],
            id="without a change time the first read is a baseline and a change keys on the read time",
        ),
        pytest.param(
            [("B1", "Off", T0, T1)],
            [("w:Off:29614080", "B1", T0)],
            id="with the controller's change time the first read is delivered under its key",
        ),
        pytest.param(
            [("B1", "Off", None, T0), ("B1", "Off", None, T1), ("B1", "Off", None, T3)],
            [],
            id="the same state read again is no change, also in a later window",
        ),
        pytest.param(
            [
                ("B1", "Off", None, T0),
                ("B1", "On", None, T1),
                ("B1", "Off", None, T2),
                ("B1", "On", None, T3),
            ],
            [("w:On:29614080", "B1", None), ("w:Off:29614080", "B1", None), ("w:On:29614081", "B1", None)],
            id="every observed change is delivered",
        ),
        pytest.param(
            [("B1", "Off", None, T0), ("B1", None, None, T1), ("B1", "Off", None, T2)],
            [],
            id="a failed read keeps the last state: no change invented",
        ),
        pytest.param(
            [(None, "Off", None, T0), (None, "On", None, T1)],
            [("w:On:29614080", None, None)],
            id="no boot id: delivered without one (identity_incomplete in the store)",
        ),
        pytest.param(
            [("B1", "Off", None, T0), ("B2", "Off", None, T1)],
            [],
            id="a controller restart alone is no state change",
        ),
    ],
)
def test_a_window_channel_is_delivered_when_its_state_changes(
    reads: list[Read], delivered: list[tuple[str, str | None, str | None]]
) -> None:
    tracker = DeviceTracker("PUMP-07")
    got = [d for r in reads for d in tracker.observe(snap(r[0], r[1], r[2], r[3])).deliveries]
    assert [(d.transition_id, d.boot_id, d.source_timestamp) for d in got] == delivered
    for d in got:
        assert d.basis == IdentityBasis.WINDOW and d.source == "PUMP-07/Coil"
        assert d.payload == {"state": d.transition_id.split(":")[1]}
        assert d.evidence["window"]["ms"] == MIN  # the arithmetic of the key, kept as evidence


def test_two_paths_reading_one_change_in_one_window_make_the_same_delivery_content() -> None:
    a, b = DeviceTracker("PUMP-07"), DeviceTracker("PUMP-07")
    for t in (a, b):
        t.observe(snap("B1", "Off", None, T0))
    da = a.observe(snap("B1", "On", None, T1)).deliveries[0]
    db = b.observe(snap("B1", "On", None, T2)).deliveries[0]
    assert (da.key, da.payload_hash) == (db.key, db.payload_hash)  # arrival time is evidence only


# --- the flag on every result ----------------------------------------------------------------------


def test_every_result_of_a_window_delivery_carries_the_window_key_flag() -> None:
    tracker = DeviceTracker("PUMP-07")
    tracker.observe(snap("B1", "Off", None, T0))
    complete = tracker.observe(snap("B1", "On", None, T1)).deliveries[0]
    incomplete = DeviceTracker("PUMP-07")
    incomplete.observe(snap(None, "Off", None, T0))
    no_boot = incomplete.observe(snap(None, "On", None, T1)).deliveries[0]
    assert complete.key is not None
    outcomes, _ = classify([complete, complete, no_boot], {complete.key: (1, complete.payload_hash)}, 0)
    assert [(o.decision, o.flags) for o in outcomes] == [
        (Decision.INSERTED, (WINDOW_KEY,)),
        (Decision.DUPLICATE, (WINDOW_KEY,)),
        (Decision.IDENTITY_INCOMPLETE, (WINDOW_KEY,)),
    ]


@pytest.mark.parametrize(
    ("basis", "flags"),
    [("counter", ()), ("event_id", ()), ("window", (WINDOW_KEY,))],
)
def test_only_a_window_key_is_flagged(basis: str, flags: tuple[str, ...]) -> None:
    assert basis_flags(basis) == flags

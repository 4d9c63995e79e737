"""BootObserved generations as a pure function: live vs buffered, previous boot, late data."""

from __future__ import annotations

import pytest

from agent.core.decide import BootSighting, new_boots


def seen(boot: str, live: bool = True, device: str = "PUMP-07") -> BootSighting:
    return BootSighting(device, boot, "2026-04-22T08:00:00.000Z", None, live)


@pytest.mark.parametrize(
    ("known", "last_live", "sightings", "expected", "latest"),
    [
        pytest.param(
            set(), {}, [seen("B17")], [("B17", None)], {"PUMP-07": "B17"}, id="first boot has no previous"
        ),
        pytest.param(
            {("PUMP-07", "B17")},
            {"PUMP-07": "B17"},
            [seen("B18")],
            [("B18", "B17")],
            {"PUMP-07": "B18"},
            id="a live restart names the previous boot",
        ),
        pytest.param(
            {("PUMP-07", "B17"), ("PUMP-07", "B18")},
            {"PUMP-07": "B18"},
            [seen("B17")],
            [],
            {},
            id="late data under a known boot makes no record",
        ),
        pytest.param(
            set(),
            {"PUMP-07": "B18"},
            [seen("B16", live=False)],
            [("B16", None)],
            {},
            id="a boot first seen in buffered data has no previous and does not move the live boot",
        ),
        pytest.param(
            {("PUMP-07", "B18")},
            {"PUMP-07": "B18"},
            [seen("B19", live=False), seen("B19")],
            [("B19", None)],
            {},
            id="seen buffered first, then live: one record, from the buffer",
        ),
        pytest.param(
            set(),
            {},
            [seen("B1"), seen("B2"), seen("B1")],
            [("B1", None), ("B2", "B1")],
            {"PUMP-07": "B2"},
            id="two new boots in one batch chain in order",
        ),
        pytest.param(
            set(),
            {"A": "B9"},
            [seen("B1", device="B")],
            [("B1", None)],
            {"B": "B1"},
            id="boots are per device",
        ),
    ],
)
def test_new_boots(
    known: set[tuple[str, str]],
    last_live: dict[str, str | None],
    sightings: list[BootSighting],
    expected: list[tuple[str, str | None]],
    latest: dict[str, str],
) -> None:
    records, changed = new_boots(sightings, known, last_live)
    assert [(r.boot_id, r.previous_boot_id) for r in records] == expected
    assert changed == latest

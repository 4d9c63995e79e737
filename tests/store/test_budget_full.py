"""`status` headroom comes from real free space: a full filesystem is no room, whatever pages
are free inside the store file or however many days of history the store holds."""

from __future__ import annotations

from typing import Any

import pytest

from agent.store.budget import WAL_ROOM, SizeFacts, assess


def facts(**kw: Any) -> SizeFacts:
    base: dict[str, Any] = dict(
        store_bytes=100_000_000, free_pages_bytes=20_000_000, fs_free_bytes=900_000_000,
        fs_total_bytes=2_000_000_000, max_bytes=None, rows=1_000_000, arrivals_in_window=70_000,
        window_days=7.0,
    )  # fmt: skip
    return SizeFacts(**{**base, **kw})


@pytest.mark.parametrize(
    ("f", "days", "full"),  # 80 bytes a row, 10,000 rows a day: 0.8 MB a day
    [
        pytest.param(facts(), 1150.0, False, id="a roomy disk has room for years"),
        pytest.param(facts(fs_free_bytes=0), 0.0, True, id="0 bytes free is no room at all"),
        pytest.param(facts(fs_free_bytes=WAL_ROOM - 1), 0.0, True, id="less than the WAL needs is full"),
        pytest.param(facts(fs_free_bytes=WAL_ROOM * 10), 38.107, False, id="a little room is a little"),
    ],
)
def test_room_left_is_from_the_free_space_on_the_filesystem(f: SizeFacts, days: float, full: bool) -> None:
    b = assess(f, high_water=0.8)
    assert b.days_until_full == pytest.approx(days, rel=0.01)
    assert ("bytes free: the store is full now" in (b.warning or "")) is full

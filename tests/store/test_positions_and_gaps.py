"""Poller positions and gaps on a real store: recorded with the reads that moved them, read back
for the resume; a gap names only what the store does not hold, and is logged once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.core.contract import Anomaly, Delivery
from agent.core.decide import BootSighting
from agent.core.snapshot import Positions, make_delivery
from agent.core.tracker import Resume
from agent.store.reader import Reader
from agent.store.store import Store

AT = "2026-04-22T08:00:00.000Z"


def delivery(tid: int, boot: str = "17", receiver: str = "opcua:x", state: str = "Trip") -> Delivery:
    return make_delivery(
        device="PUMP-07", channel="Trip", transition_id=tid, boot_id=boot, state=state,
        source_timestamp=None, latched={}, arrival_at=AT, receiver=receiver, live=True, raw={},
    )  # fmt: skip


def gap(first: int, last: int, kind: str = "gap", boot: str = "17") -> Anomaly:
    return Anomaly("PUMP-07/Trip", boot, kind, str(first), str(last), AT, {"receiver": "modbus:y"})


async def gaps(store: Store) -> list[tuple[str, str, str, str]]:
    rows = await store.db.execute_fetchall(
        "SELECT kind, boot_id, from_value, to_value FROM anomalies ORDER BY anomaly_id"
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


@pytest.mark.parametrize(
    ("held", "claimed", "recorded"),
    [
        pytest.param([], (4, 7), [("gap", "17", "4", "7")], id="nothing held: the whole range"),
        pytest.param([4, 5, 6, 7], (4, 7), [], id="all held (another path delivered them): no gap"),
        pytest.param(
            [5], (4, 7), [("gap", "17", "4", "4"), ("gap", "17", "6", "7")], id="one held: the range splits"
        ),
        pytest.param([4, 7], (4, 7), [("gap", "17", "5", "6")], id="both ends held: the middle"),
    ],
)
async def test_a_gap_names_only_what_the_store_does_not_hold(
    store: Store, held: list[int], claimed: tuple[int, int], recorded: list[tuple[str, ...]]
) -> None:
    await store.record([delivery(t) for t in held])
    await store.record([], anomalies=[gap(*claimed)], now=AT)
    assert await gaps(store) == recorded


async def test_held_means_this_source_and_boot_and_also_counts_the_same_batch(store: Store) -> None:
    await store.record([delivery(5, boot="16")])  # another boot: does not fill a gap of boot 17
    await store.record([delivery(6)], anomalies=[gap(4, 7, "overrun")], now=AT)
    assert await gaps(store) == [("overrun", "17", "4", "5"), ("overrun", "17", "7", "7")]


async def test_two_paths_claiming_one_gap_make_one_record_and_one_log_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        await store.record([], anomalies=[gap(4, 7)], now=AT)
        await store.record([], anomalies=[gap(4, 7)], now=AT)
    assert await gaps(store) == [("gap", "17", "4", "7")]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("gap ")] == [
        "gap source=PUMP-07/Trip boot_id=17 from=4 to=7"
    ]


async def test_positions_are_read_back_as_resume_points(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path) as store:
        sighting = BootSighting("PUMP-07", "17", AT, None, True, {})
        await store.record(
            [delivery(3)], boot_sightings=[sighting], positions=[Positions("PUMP-07", "17", {"Trip": 3}, 12)]
        )
        await store.record([], positions=[Positions("PUMP-07", "17", {"Trip": 1, "OverTemp": 2})], now=AT)
    async with await Reader.open(path) as reader:
        points = await reader.resume_points(["PUMP-07", "PUMP-7", "VALVE-01"])
    assert points == {
        "PUMP-07": Resume("17", {"Trip": 1, "OverTemp": 2}, 12),  # the last position, not the highest
        "PUMP-7": Resume(),  # a prefix of another device's name is another device
        "VALVE-01": Resume(),
    }

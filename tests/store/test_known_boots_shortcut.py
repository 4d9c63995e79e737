"""A batch whose boots are all known makes no sightings; one new boot among known ones still
makes its BootObserved row (agent.store.batch.batch_boots)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.core import decide
from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery
from agent.store import report
from agent.store.store import Store


def line(source: str, tid: str, boot: str | None) -> Delivery | Rejection:
    obj: dict[str, Any] = {"source": source, "transitionId": tid, "payload": {"v": tid}}
    if boot is not None:
        obj["bootId"] = boot
    return parse_delivery(json.dumps(obj), arrival_at="2026-04-22T08:00:00.000Z", receiver="test")


BATCH = [
    line("PUMP-07/Trip", "1", "B17"),
    line("PUMP-07/Alarm", "1", "B17"),
    line("PUMP-08/Trip", "1", "B3"),
    line("PUMP-07", "2", "B18"),
    line("PUMP-09/Trip", "1", None),
    parse_delivery("not json", arrival_at="2026-04-22T08:00:00.000Z", receiver="test"),
]


def test_boot_pairs_are_the_pairs_sightings_are_made_of() -> None:
    assert decide.boot_pairs(BATCH) == {(s.device, s.boot_id) for s in decide.sightings_of(BATCH)}
    assert decide.boot_pairs(BATCH) == {("PUMP-07", "B17"), ("PUMP-08", "B3"), ("PUMP-07", "B18")}


async def test_known_boots_make_no_sightings_and_a_new_one_among_them_is_recorded(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.record([line("PUMP-07/Trip", "1", "B17"), line("PUMP-08/Trip", "1", "B3")])
    made: list[int] = []
    sightings_of = decide.sightings_of

    def counted(items: Any) -> list[decide.BootSighting]:
        made.append(len(items))
        return sightings_of(items)

    monkeypatch.setattr(decide, "sightings_of", counted)
    await store.record([line("PUMP-07/Trip", "2", "B17"), line("PUMP-08/Alarm", "2", "B3")])
    assert made == []  # every boot known: no sighting built
    await store.record([line("PUMP-07/Trip", "3", "B17"), line("PUMP-07/Trip", "1", "B18")])
    assert made == [2]
    boots = [(b["device"], b["bootId"], b["previous_bootId"]) async for b in report.boots(store.db)]
    assert sorted(boots) == [("PUMP-07", "B17", None), ("PUMP-07", "B18", "B17"), ("PUMP-08", "B3", None)]

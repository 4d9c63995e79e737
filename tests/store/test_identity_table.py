"""What "the same event" means, pinned as a table over a real SQLite store.

Each case feeds lines (JSON objects, as the offline file has them) to the
store in order and states the decision of every line. Cases run once with
every line in its own batch and once with all lines in one batch: the
decision must not depend on batching.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.core.contract import Delivery, Rejection
from agent.core.intake import parse_delivery
from agent.store import report
from agent.store.store import Store

NOW = "2026-04-22T09:00:00.000Z"


def line(**fields: Any) -> str:
    base: dict[str, Any] = {
        "source": "PUMP-07/Trip",
        "transitionId": "T91",
        "bootId": "B17",
        "sourceTimestamp": "2026-04-22T08:00:12.120Z",
        "payload": {"state": "Trip", "severity": "High"},
    }
    for k, v in fields.items():
        if v is _DROP:
            base.pop(k, None)
        else:
            base[k] = v
    return json.dumps(base)


_DROP = object()

CASES = [
    pytest.param(
        [
            line(),
            '{ "payload": {"severity":"High","state":"Trip"}, "bootId":"B17", "transitionId":"T91",'
            '   "sourceTimestamp":"2026-04-22T08:00:12.120Z", "source":"PUMP-07/Trip" }',
        ],
        ["inserted", "duplicate"],
        id="key order and whitespace never make a conflict",
    ),
    pytest.param(
        [line(transitionId=91), line(transitionId="91")],
        ["inserted", "duplicate"],
        id="an integer id is its decimal text: 91 and '91' are one id",
    ),
    pytest.param(
        [line(transitionId="91"), line(transitionId="091")],
        ["inserted", "inserted"],
        id="'091' is another id than '91'",
    ),
    pytest.param(
        [line(bootId=17), line(bootId="17")],
        ["inserted", "duplicate"],
        id="the same text rule holds for bootId",
    ),
    pytest.param(
        [
            line(sourceTimestamp="2026-04-22T10:00:12.120+02:00"),
            line(sourceTimestamp="2026-04-22T08:00:12.120Z"),
        ],
        ["inserted", "duplicate"],
        id="equivalent timestamps in other offsets are the same instant",
    ),
    pytest.param(
        [line(sourceTimestamp="2026-04-22T08:00:12.1209Z"), line(sourceTimestamp="2026-04-22T08:00:12.120Z")],
        ["inserted", "duplicate"],
        id="digits finer than a millisecond are truncated, not rounded",
    ),
    pytest.param(
        [line(sourceTimestamp="2026-04-22T08:00:12.120Z"), line(sourceTimestamp="2026-04-22T08:00:12.121Z")],
        ["inserted", "conflict"],
        id="a different source timestamp under one key is a conflict",
    ),
    pytest.param(
        [line(), line(sourceTimestamp=None)],
        ["inserted", "conflict"],
        id="a missing source timestamp is other content than a present one",
    ),
    pytest.param(
        [line(), line(payload={"state": "Trip", "severity": "Low"})],
        ["inserted", "conflict"],
        id="a different severity under one key is a conflict",
    ),
    pytest.param(
        [line(payload={"v": 1.0}), line(payload={"v": 1})],
        ["inserted", "duplicate"],
        id="1.0 and 1 are the same number",
    ),
    pytest.param(
        [line(bootId="1:2", transitionId="3"), line(bootId="1", transitionId="2:3")],
        ["inserted", "inserted"],
        id="separators inside ids never join two keys",
    ),
    pytest.param(
        [line(source="PUMP/07", transitionId="Trip/T1"), line(source="PUMP", transitionId="07/Trip/T1")],
        ["inserted", "inserted"],
        id="a slash moved between source and transitionId makes another key",
    ),
    pytest.param(
        [line(bootId=""), line(bootId=_DROP), line(bootId=None)],
        ["identity_incomplete", "identity_incomplete", "identity_incomplete"],
        id="empty, missing and null bootId are all incomplete and never merged",
    ),
    pytest.param(
        [line(source=""), line(transitionId=None)],
        ["identity_incomplete", "identity_incomplete"],
        id="a missing source or transitionId is incomplete too",
    ),
    pytest.param(
        [
            line(arrivalAt="2026-04-22T08:00:13.000Z", gateway="gw-1"),
            line(arrivalAt="2026-04-23T00:00:00Z", gateway="gw-2"),
        ],
        ["inserted", "duplicate"],
        id="evidence fields (arrivalAt, unknown fields) never take part in identity",
    ),
    pytest.param(
        [line(bootId="B17"), line(bootId="B18"), line(bootId="B17", transitionId="T92")],
        ["inserted", "inserted", "inserted"],
        id="late data from an older boot is a new event under the boot it carries",
    ),
    pytest.param(
        [line(bootId="B17"), line(bootId="B18")],
        ["inserted", "inserted"],
        id="the same transitionId under a new bootId is a new event",
    ),
    pytest.param(
        [
            line(),
            line(payload={"state": "Trip", "severity": "Low"}),
            line(payload={"state": "Trip", "severity": "Low"}),
            line(),
        ],
        ["inserted", "conflict", "conflict", "duplicate"],
        id="conflict then the original again: the canonical's own hash decides",
    ),
    pytest.param(
        [
            "not json",
            "[1, 2]",
            line(),
            line(payload=[1]),
            line(bootId=True),
            line(sourceTimestamp="yesterday"),
        ],
        ["rejected", "rejected", "inserted", "rejected", "rejected", "rejected"],
        id="unparseable lines are rejected and the rest goes on",
    ),
    pytest.param(
        [line(bootId=_DROP, sourceTimestamp="2026-04-22 08:00")],
        ["rejected"],
        id="rejected is decided before identity_incomplete",
    ),
]


async def decide(store: Store, lines: list[str], one_batch: bool) -> list[str]:
    items: list[Delivery | Rejection] = [
        parse_delivery(text, arrival_at=NOW, receiver="test", line=n) for n, text in enumerate(lines, 1)
    ]
    if one_batch:
        outcomes = await store.record(items)
    else:
        outcomes = [oc for item in items for oc in await store.record([item])]
    return [oc.decision.value for oc in outcomes]


@pytest.mark.parametrize("one_batch", [False, True], ids=["batch of one", "one batch"])
@pytest.mark.parametrize(("lines", "expected"), CASES)
async def test_identity_table(tmp_path: Path, lines: list[str], expected: list[str], one_batch: bool) -> None:
    store = await Store.open(tmp_path / "s.db")
    try:
        assert await decide(store, lines, one_batch) == expected
        summary = await report.summary(store.db)
        assert summary["arrivals"] == len(lines), "every delivery is kept in the arrival log"
        assert summary["source_events"] == expected.count("inserted")
    finally:
        await store.close()


async def test_conflict_marks_canonical_and_keeps_first_content(store: Store) -> None:
    await decide(store, [line(), line(payload={"state": "Trip", "severity": "Low"})], one_batch=False)
    events = [e async for e in report.events(store.db)]
    assert len(events) == 1
    ev = events[0]
    assert ev["status"] == "DuplicateConflict"
    assert ev["payload"] == {"state": "Trip", "severity": "High"}
    assert (ev["duplicate_count"], ev["conflict_count"]) == (1, 1)
    arrivals = [a async for a in report.arrivals(store.db)]
    assert [a["decision"] for a in arrivals] == ["inserted", "conflict"]
    assert "Low" in arrivals[1]["raw"], "the conflicting original is kept for review"


async def test_first_and_last_arrival_span_every_arrival_whatever_the_order(store: Store) -> None:
    late = line(arrivalAt="2026-04-22T08:00:15.000Z")
    early = line(arrivalAt="2026-04-22T08:00:12.500Z")
    conflict_earliest = line(arrivalAt="2026-04-22T08:00:12.200Z", payload={"x": 1})
    await decide(store, [late, early, conflict_earliest], one_batch=False)
    ev = [e async for e in report.events(store.db)][0]
    assert ev["first_arrival"] == "2026-04-22T08:00:12.200Z"
    assert ev["last_arrival"] == "2026-04-22T08:00:15.000Z"

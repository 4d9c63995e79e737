"""The retention rules as pure functions: units, settings errors, verdicts, the size budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.config import retention as rs
from agent.core import retention as r
from agent.core.errors import ConfigError
from agent.store.budget import SizeFacts, assess

NOW = datetime(2026, 6, 1, tzinfo=UTC)
CUT = r.cutoffs(rs.DEFAULTS, NOW)
OLD = "2020-01-01T00:00:00.000Z"
YOUNG = "2026-05-31T00:00:00.000Z"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            {"keys": "30"}, "store.retention.keys: '30' is not a duration", id="a number without unit"
        ),
        pytest.param({"keys": 30}, "store.retention.keys: 30 is not a duration", id="a bare integer"),
        pytest.param({"payload": "90d"}, "store.retention.payload: unknown setting", id="a misspelt key"),
        pytest.param({"arrivals": "0d"}, "store.retention.arrivals: must be longer than zero", id="zero"),
        pytest.param(
            {"arrivals": "100d"}, "store.retention.arrivals: 100d is longer than payloads", id="order"
        ),
        pytest.param(
            {"keys": "60d"}, "store.retention.keys: 60d must be longer than payloads", id="short keys"
        ),
        pytest.param(
            {"batch_rows": 1.5}, "store.retention.batch_rows: 1.5 is not an integer", id="batch float"
        ),
        pytest.param({"high_water": 2}, "store.retention.high_water: 2 must be between", id="high water > 1"),
        pytest.param(["30d"], "store.retention: must be a mapping", id="not a mapping"),
    ],
)
def test_bad_settings_name_the_key(doc: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        rs.parse_retention(doc)


def test_defaults_are_safe_and_keys_outlive_payloads() -> None:
    s = rs.parse_retention(None)
    assert s == rs.RetentionSettings()
    assert s.arrivals <= s.payloads < s.keys
    assert s.keys >= timedelta(days=365)
    got = rs.parse_retention({"arrivals": "7d", "payloads": "14d", "keys": "400d", "batch_rows": 500})
    assert (got.arrivals, got.payloads, got.batch_rows) == (timedelta(days=7), timedelta(days=14), 500)


def ev(
    status: str = "Canonical", last: str = OLD, states: tuple[str, ...] = ("delivered",), left: int = 0
) -> Any:
    return r.EventFacts(status, last, states, left)


@pytest.mark.parametrize(
    ("facts", "goes", "reason"),
    [
        pytest.param(ev(), True, r.GOES, id="an old event delivered everywhere goes"),
        pytest.param(
            ev(states=("delivered", "pending")), False, r.UNSENT, id="one upstream still pending keeps it"
        ),
        pytest.param(ev(states=("rejected", "delivered")), False, r.DEAD_LETTER, id="a dead letter keeps it"),
        pytest.param(ev(states=()), False, r.UNROUTED, id="never routed keeps it for a backfill"),
        pytest.param(
            ev(status="DuplicateConflict"), False, r.CONFLICT, id="a conflict awaiting review stays"
        ),
        pytest.param(ev(last=YOUNG), False, r.YOUNG, id="a recent re-delivery keeps it"),
        pytest.param(ev(left=1), False, r.ARRIVALS_LEFT, id="its arrivals go first"),
    ],
)
def test_payload_verdicts(facts: Any, goes: bool, reason: str) -> None:
    assert r.payload_verdict(facts, CUT) == r.Verdict(goes, reason)


@pytest.mark.parametrize(
    ("facts", "goes", "reason"),
    [
        pytest.param(r.ArrivalFacts("inserted", OLD, event=ev()), True, r.GOES, id="old and delivered goes"),
        pytest.param(
            r.ArrivalFacts("duplicate", OLD, event=None), True, r.GOES, id="payload already pruned goes"
        ),
        pytest.param(r.ArrivalFacts("inserted", YOUNG, event=ev()), False, r.YOUNG, id="young stays"),
        pytest.param(
            r.ArrivalFacts("inserted", OLD, event=ev(states=("pending",))), False, r.UNSENT, id="unsent stays"
        ),
        pytest.param(
            r.ArrivalFacts("identity_incomplete", OLD, pending=True), False, r.PENDING, id="pending"
        ),
        pytest.param(r.ArrivalFacts("rejected", OLD), False, r.REJECTED_INPUT, id="a rejected line stays"),
        pytest.param(r.ArrivalFacts("conflict", OLD, event=None), False, r.CONFLICT, id="a conflict stays"),
        pytest.param(
            r.ArrivalFacts("inserted", OLD, boot_evidence=True, event=ev()), False, r.BOOT_EVIDENCE, id="boot"
        ),
    ],
)
def test_arrival_verdicts(facts: r.ArrivalFacts, goes: bool, reason: str) -> None:
    assert r.arrival_verdict(facts, CUT) == r.Verdict(goes, reason)


@pytest.mark.parametrize(
    ("last", "conflicts", "goes"),
    [
        pytest.param(OLD, 0, True, id="a key past the key horizon is forgotten"),
        pytest.param("2026-01-01T00:00:00.000Z", 0, False, id="a key inside the key horizon is kept"),
        pytest.param(OLD, 1, False, id="a key with a conflict is kept for review"),
    ],
)
def test_key_verdicts(last: str, conflicts: int, goes: bool) -> None:
    assert r.key_verdict(last, conflicts, CUT).goes is goes


def facts(**kw: Any) -> SizeFacts:
    base: dict[str, Any] = dict(
        store_bytes=100_000_000, free_pages_bytes=0, fs_free_bytes=900_000_000, fs_total_bytes=2_000_000_000,
        max_bytes=None, rows=1_000_000, arrivals_in_window=70_000, window_days=7.0,
    )  # fmt: skip
    return SizeFacts(**{**base, **kw})


@pytest.mark.parametrize(
    ("f", "fit", "warns"),
    [
        pytest.param(facts(), 1_000.0, None, id="a roomy disk holds years of history"),
        pytest.param(facts(max_bytes=200_000_000), 200.0, None, id="the quota is the budget"),
        pytest.param(facts(max_bytes=110_000_000), 110.0, "high-water", id="above the high-water mark warns"),
        pytest.param(facts(fs_free_bytes=50_000_000, rows=10_000_000), 1_500.0, None, id="a fuller disk"),
        pytest.param(
            facts(arrivals_in_window=7_000_000), 10.0, "less than the 90", id="too fast for horizon"
        ),
        pytest.param(facts(arrivals_in_window=0), None, None, id="no recent arrivals: no rate"),
    ],
)
def test_size_budget(f: SizeFacts, fit: float | None, warns: str | None) -> None:
    b = assess(f, high_water=0.8, keep_days=90)
    assert b.days_that_fit == (pytest.approx(fit) if fit is not None else None)
    assert (b.warning is None) if warns is None else (warns in (b.warning or ""))

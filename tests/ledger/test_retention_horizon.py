"""The identity horizon (ledger.md "Retention and the identity horizon"): a key with no identity
whose event time (source time, else the gateway's arrival time) is older than now - horizon is
`beyond_horizon`: kept on the pending list for a person, counted, no canonical, no notification.
A key that has its identity is decided against it however old: `duplicate` or `conflict`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agent.core import decide
from agent.core.contract import Decision, Delivery, Key
from agent.core.intake import parse_delivery
from agent.ledger import arbiter, report
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
NOW = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)
YEAR = 365 * 86400.0
HORIZON = 5 * YEAR  # the cutoff: 2026-06-02T12:00Z
RECENT, OLD = "2030-01-01T00:00:00.000Z", "2020-01-01T00:00:00.000Z"
ARRIVED = "2031-06-01T11:59:00.000Z"


def line(tid: str, *, ts: str | None, arrived: str = ARRIVED, payload: Any = 1) -> str:
    obj: dict[str, Any] = {"source": "P/T", "transitionId": tid, "bootId": "B1", "arrivalAt": arrived}
    if ts is not None:
        obj["sourceTimestamp"] = ts
    obj["payload"] = {"v": payload}
    return json.dumps(obj)


def delivery(text: str) -> Delivery:
    d = parse_delivery(text, arrival_at=ARRIVED, receiver="t")
    assert isinstance(d, Delivery)
    return d


# (case, source time, gateway arrival time, the key has an identity already, expected decision)
PURE_CASES = [
    ("recent source time, new key", RECENT, ARRIVED, False, "inserted"),
    ("old source time, new key", OLD, ARRIVED, False, "beyond_horizon"),
    ("no source time, old gateway arrival", None, "2019-05-01T00:00:00.000Z", False, "beyond_horizon"),
    ("no source time, recent gateway arrival", None, ARRIVED, False, "inserted"),
    (
        "old source time, recent gateway arrival: the source time counts",
        OLD,
        ARRIVED,
        False,
        "beyond_horizon",
    ),
    ("old, but the identity is kept: decided against it", OLD, ARRIVED, True, "duplicate"),
    ("just inside the horizon", "2026-06-02T12:00:00.000Z", ARRIVED, False, "inserted"),
    ("just outside the horizon", "2026-06-02T11:59:59.999Z", ARRIVED, False, "beyond_horizon"),
]


@pytest.mark.parametrize(
    ("case", "ts", "arrived", "known", "want"), PURE_CASES, ids=[c[0] for c in PURE_CASES]
)
def test_the_pure_decision_beyond_the_horizon(
    case: str, ts: str | None, arrived: str, known: bool, want: str
) -> None:
    d = delivery(line("T1", ts=ts, arrived=arrived))
    assert d.key is not None
    cutoff = decide.horizon_cutoff(NOW, HORIZON)
    beyond = set() if known else {d.key} if decide.beyond_horizon(d, cutoff) else set()
    canonical = {} if d.key in beyond else {d.key: (7, d.payload_hash)}
    created = set() if known else {d.key}
    outcomes, _ = decide.classify([d], canonical, 0, created=created, beyond=beyond)
    assert outcomes[0].decision.value == want
    if want == "beyond_horizon":
        assert outcomes[0].canonical_id is None and outcomes[0].reason == decide.BEYOND_REASON


def test_every_delivery_of_a_key_beyond_the_horizon_in_one_batch_is_beyond_it() -> None:
    a, b = delivery(line("T1", ts=OLD)), delivery(line("T1", ts=OLD, payload=2))
    outcomes, _ = decide.classify([a, b], {}, 0, created=set(), beyond={Key("P/T", "T1", "B1")})
    assert [o.decision for o in outcomes] == [Decision.BEYOND_HORIZON] * 2


async def record(
    conn: Conn, lines: list[str], horizon_s: float | None = HORIZON, gateway: str = "gw"
) -> list[str]:
    arrivals = [
        Arrival(parse_delivery(t, arrival_at=ARRIVED, receiver="t", line=n), gateway, "import")
        for n, t in enumerate(lines, 1)
    ]
    rules = [NotifyRule("every-event", "http://127.0.0.1:1/x")]
    outcomes = await arbiter.record(conn, arrivals, now=NOW, rules=rules, horizon_s=horizon_s)
    return [oc.decision.value for oc in outcomes]


async def test_beyond_the_horizon_in_the_ledger_is_kept_for_a_person_with_no_canonical(
    ledger_conn: Conn,
) -> None:
    got = await record(
        ledger_conn,
        [
            line("T1", ts=RECENT),
            line("T2", ts=OLD),
            line("T2", ts=OLD, payload=2),  # the same old key again, other content
            line("T3", ts=None, arrived="2019-05-01T00:00:00.000Z"),
        ],
    )
    assert got == ["inserted", "beyond_horizon", "beyond_horizon", "beyond_horizon"]
    cur = await ledger_conn.execute("SELECT transition_id FROM canonical_event ORDER BY id")
    assert [r[0] for r in await cur.fetchall()] == ["T1"], "no canonical for a key beyond the horizon"
    cur = await ledger_conn.execute(
        "SELECT a.transition_id, a.decision, a.canonical_id, a.reason FROM pending p"
        " JOIN arrival a ON a.id = p.arrival_id WHERE p.state = 'open' ORDER BY a.id"
    )
    rows = await cur.fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("T2", "beyond_horizon", None),
        ("T2", "beyond_horizon", None),
        ("T3", "beyond_horizon", None),
    ], "each one on the pending list, for a person"
    assert all(r[3] == decide.BEYOND_REASON for r in rows)
    cur = await ledger_conn.execute("SELECT count(*) FROM notification")
    assert (await cur.fetchone())[0] == 1, "a notification for the inserted event only"  # type: ignore[index]
    await ledger_conn.rollback()
    summary = await report.summary(ledger_conn)
    assert summary["beyond_horizon"] == 3 and summary["arrivals"] == 4
    pending = [p async for p in report.pending(ledger_conn)]
    assert [p["decision"] for p in pending] == ["beyond_horizon"] * 3


async def test_an_old_key_whose_identity_is_kept_is_decided_against_it(ledger_conn: Conn) -> None:
    assert await record(ledger_conn, [line("T1", ts=OLD)], horizon_s=None) == ["inserted"]
    got = await record(ledger_conn, [line("T1", ts=OLD), line("T1", ts=OLD, payload=2)], gateway="gw-2")
    assert got == ["duplicate", "conflict"], "the identity is there: never beyond the horizon"


async def test_without_a_horizon_nothing_is_beyond_it(ledger_conn: Conn) -> None:
    assert await record(ledger_conn, [line("T9", ts="1999-01-01T00:00:00.000Z")], horizon_s=None) == [
        "inserted"
    ]

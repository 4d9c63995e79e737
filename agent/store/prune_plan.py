"""`prune --dry-run`: what pruning would remove at `now`, and why the rest of the old data stays.

Read-only. Only records older than their horizon are examined (younger ones
stay for that reason alone); each is judged by the verdict functions of
`agent.core.retention`, the statement of the rules that the tests hold the
SQL of `agent.store.prune` to. Figures are for one run from the current state:
the payload stage counts an event whose arrivals would go in the same run.
Runs on the writer's connection (under its lock) or on a reader's; never writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent.config.retention import RetentionSettings, days_text
from agent.core.retention import (
    ArrivalFacts,
    Cutoffs,
    EventFacts,
    arrival_verdict,
    cutoffs,
    key_verdict,
    payload_verdict,
)
from agent.store.prune import upstream_names
from agent.store.tally import LAST_ARRIVAL, TALLY_BY_EVENT

if TYPE_CHECKING:
    from agent.store.store import Store


@dataclass(slots=True)
class StagePlan:
    """One stage: how many records would go, and the old records that stay, by reason."""

    horizon: str
    cutoff: str
    goes: int = 0
    kept: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"horizon": self.horizon, "cutoff": self.cutoff, "goes": self.goes, "kept": dict(self.kept)}


def _states(text: str | None) -> tuple[str, ...]:
    return tuple(text.split(",")) if text else ()


async def plan(store: Store, settings: RetentionSettings, now: datetime) -> dict[str, StagePlan]:
    """The dry run on the writer's connection, under its lock."""
    async with store._lock:
        return await plan_on(store.db, settings, now)


async def plan_on(
    db: aiosqlite.Connection, settings: RetentionSettings, now: datetime
) -> dict[str, StagePlan]:
    """The dry run: {'arrivals': ..., 'payloads': ..., 'keys': ...}."""
    cut = cutoffs(settings, now)
    out = {
        "arrivals": StagePlan(days_text(settings.arrivals), cut.arrivals),
        "payloads": StagePlan(days_text(settings.payloads), cut.payloads),
        "keys": StagePlan(days_text(settings.keys), cut.keys),
    }
    marks, ups = await upstream_names(db)
    await _plan_arrivals(db, cut, marks, ups, out["arrivals"])
    await _plan_payloads(db, cut, marks, ups, out["payloads"])
    async with db.execute(
        "SELECT last_arrival, conflict_count FROM event_keys WHERE last_arrival < ?", (cut.keys,)
    ) as cur:
        while rows := await cur.fetchmany(5000):
            for last, conflicts in rows:
                _tally(out["keys"], key_verdict(last, int(conflicts), cut))
    return out


def _tally(stage: StagePlan, verdict: Any) -> None:
    if verdict.goes:
        stage.goes += 1
    else:
        stage.kept[verdict.reason] += 1


_OUTBOX_STATES = (
    "(SELECT group_concat(o.state) FROM outbox o WHERE o.upstream IN ({marks}) AND o.kind = 'transition'"
    " AND o.ref_id = e.canonical_id)"
)


async def _plan_arrivals(
    db: aiosqlite.Connection, cut: Cutoffs, marks: str, ups: dict[str, Any], stage: StagePlan
) -> None:
    sql = (
        "SELECT a.decision, a.arrival_at, a.arrival_id IN (SELECT arrival_id FROM pending),"
        " a.arrival_id IN (SELECT arrival_id FROM boots WHERE arrival_id IS NOT NULL),"
        f" e.canonical_id, e.status, {LAST_ARRIVAL}, {_OUTBOX_STATES.format(marks=marks)}"
        " FROM arrivals a LEFT JOIN events e ON e.canonical_id = a.canonical_id"
        f" LEFT JOIN ({TALLY_BY_EVENT}) t ON t.tally_id = e.canonical_id WHERE a.arrival_at < :cut"
    )
    async with db.execute(sql, {"cut": cut.arrivals, **ups}) as cur:
        while rows := await cur.fetchmany(5000):
            for decision, arrival_at, pending, boot, cid, status, last, states in rows:
                event = EventFacts(status, last, _states(states)) if cid is not None else None
                facts = ArrivalFacts(decision, arrival_at, bool(pending), bool(boot), event)
                _tally(stage, arrival_verdict(facts, cut))


async def _plan_payloads(
    db: aiosqlite.Connection, cut: Cutoffs, marks: str, ups: dict[str, Any], stage: StagePlan
) -> None:
    # Arrivals that this run keeps: younger than their horizon, or kept for a reason of their own,
    # counted per event in one pass over the arrivals (they have no index by canonical id).
    sql = (
        f"SELECT e.status, {LAST_ARRIVAL}, {_OUTBOX_STATES.format(marks=marks)}, coalesce(k.kept, 0)"
        f" FROM events e LEFT JOIN ({TALLY_BY_EVENT}) t ON t.tally_id = e.canonical_id"
        " LEFT JOIN (SELECT a.canonical_id AS kept_id, count(*) AS kept FROM arrivals a"
        "  WHERE a.canonical_id IS NOT NULL AND (a.arrival_at >= :acut"
        "  OR a.decision NOT IN ('inserted', 'duplicate')"
        "  OR a.arrival_id IN (SELECT arrival_id FROM boots WHERE arrival_id IS NOT NULL))"
        "  GROUP BY a.canonical_id) k ON k.kept_id = e.canonical_id"
        f" WHERE {LAST_ARRIVAL} < :cut"
    )
    async with db.execute(sql, {"cut": cut.payloads, "acut": cut.arrivals, **ups}) as cur:
        while rows := await cur.fetchmany(5000):
            for status, last, states, left in rows:
                _tally(stage, payload_verdict(EventFacts(status, last, _states(states), int(left)), cut))

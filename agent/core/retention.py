"""Retention policy: what the store may forget, and when. Pure: cutoffs and verdicts, no I/O.

The settings are read by `agent.config.retention`; this module needs only the three horizons,
each counted back from `now` (an injected clock) against a record's newest evidence:

* `arrivals` (default 30d): an arrival row of an event delivered to every upstream goes.
* `payloads` (default 90d): the event row of a delivered canonical goes once its last arrival is
  older; its compact key record stays, so a re-delivery is still `duplicate` or `conflict`.
* `keys` (default 400d): the key records go; a new key that may be a forgotten one is flagged
  `key_horizon_passed`. `keys` must exceed the longest possible replay delay.

Never pruned: anything not delivered to every upstream, identity-incomplete arrivals,
conflicts, rejected lines, BootObserved records, gaps and anomalies (the whole list and the
reasons: docs/architecture.md, "The gateway's retention"). The SQL in `agent.store.prune`
applies these rules set-based; the verdicts here state them one record at a time for
`prune --dry-run` and for the tests that check the SQL against them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from agent.core.timestamps import format_timestamp


class Horizons(Protocol):
    """How long each kind of record is kept once delivered (the retention settings)."""

    @property
    def arrivals(self) -> timedelta: ...

    @property
    def payloads(self) -> timedelta: ...

    @property
    def keys(self) -> timedelta: ...


# --- cutoffs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Records whose (last) arrival is strictly before these instants are past their horizon."""

    arrivals: str
    payloads: str
    keys: str


def cutoffs(settings: Horizons, now: datetime) -> Cutoffs:
    """The horizons as timestamps in the store's text format (comparable as text)."""
    return Cutoffs(
        arrivals=format_timestamp(now - settings.arrivals),
        payloads=format_timestamp(now - settings.payloads),
        keys=format_timestamp(now - settings.keys),
    )


# --- verdicts, one record at a time -----------------------------------------------------

GOES = "past its horizon and delivered everywhere"
YOUNG = "younger than the horizon"
UNSENT = "not yet delivered to every upstream"
DEAD_LETTER = "rejected by an upstream (dead letter)"
UNROUTED = "never routed to an upstream (may still be backfilled)"
CONFLICT = "conflict awaiting review"
PENDING = "identity incomplete (pending list)"
REJECTED_INPUT = "rejected input line (kept as evidence)"
BOOT_EVIDENCE = "evidence of a BootObserved record"
ARRIVALS_LEFT = "its arrival log is not pruned yet"


@dataclass(frozen=True, slots=True)
class Verdict:
    goes: bool
    reason: str


@dataclass(frozen=True, slots=True)
class EventFacts:
    """What retention needs to know about one canonical event."""

    status: str
    last_arrival: str
    outbox_states: Sequence[str]  # one per upstream that has a row for it
    arrivals_left: int = 0


def delivery_verdict(outbox_states: Sequence[str]) -> Verdict | None:
    """None when delivered to every upstream that has a row; else why it must stay."""
    if not outbox_states:
        return Verdict(False, UNROUTED)
    if "rejected" in outbox_states:
        return Verdict(False, DEAD_LETTER)
    if any(s != "delivered" for s in outbox_states):
        return Verdict(False, UNSENT)
    return None


def payload_verdict(ev: EventFacts, cut: Cutoffs) -> Verdict:
    """May this canonical event's payload go (leaving its compact key record)?"""
    if ev.status != "Canonical":
        return Verdict(False, CONFLICT)
    if (held := delivery_verdict(ev.outbox_states)) is not None:
        return held
    if ev.last_arrival >= cut.payloads:
        return Verdict(False, YOUNG)
    if ev.arrivals_left:
        return Verdict(False, ARRIVALS_LEFT)
    return Verdict(True, GOES)


@dataclass(frozen=True, slots=True)
class ArrivalFacts:
    """One arrival row; `event` is None when its canonical payload was already pruned."""

    decision: str
    arrival_at: str
    pending: bool = False
    boot_evidence: bool = False
    event: EventFacts | None = None


def arrival_verdict(a: ArrivalFacts, cut: Cutoffs) -> Verdict:
    """May this arrival row go?"""
    if a.pending or a.decision == "identity_incomplete":
        return Verdict(False, PENDING)
    if a.decision == "rejected":
        return Verdict(False, REJECTED_INPUT)
    if a.decision == "conflict":
        return Verdict(False, CONFLICT)
    if a.boot_evidence:
        return Verdict(False, BOOT_EVIDENCE)
    if a.event is not None:
        if a.event.status != "Canonical":
            return Verdict(False, CONFLICT)
        if (held := delivery_verdict(a.event.outbox_states)) is not None:
            return held
    if a.arrival_at >= cut.arrivals:
        return Verdict(False, YOUNG)
    return Verdict(True, GOES)


def key_verdict(last_arrival: str, conflict_count: int, cut: Cutoffs) -> Verdict:
    """May this compact key record be forgotten?"""
    if conflict_count:
        return Verdict(False, CONFLICT)
    if last_arrival >= cut.keys:
        return Verdict(False, YOUNG)
    return Verdict(True, "past the key horizon")

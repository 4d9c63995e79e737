"""Retention: what the store may forget, and when. Pure: settings, units, cutoffs, verdicts.

Three horizons, each counted back from `now` (an injected clock) against the
newest evidence of a record (its arrival time, or its key's last arrival):

* `arrivals` (default 30d): the arrival log of events delivered to every
  upstream. An arrival row goes once it is older than this.
* `payloads` (default 90d): canonical events delivered to every upstream. The
  event row (payload, counts, outbox rows) goes once its last arrival is older
  than this; a compact key record (source, transitionId, bootId, payload_hash,
  canonical id, first and last arrival) stays, so a re-delivery is still a
  `duplicate` (or a `conflict`).
* `keys` (default 400d): the compact key records. Once a key's last arrival is
  older than this the key is forgotten; a later delivery of it would be taken
  as new, so a new key that may be a forgotten one is flagged
  `key_horizon_passed` and counted. The rule: `keys` must exceed the longest
  possible replay delay (ring buffers, offline imports, upstream outages).

Never pruned, however old: anything not delivered to every upstream (an
outbox row `pending` or `rejected`, or no outbox row at all: it may still be
backfilled), identity-incomplete arrivals (the pending list), conflicts
(events in `DuplicateConflict`, key records with conflicts, conflict
arrivals), rejected input lines, BootObserved records and their arrivals,
gaps and anomalies.

The SQL in `agent.store.prune` applies these rules set-based; the verdict
functions here state them one record at a time for `prune --dry-run` and for
the tests that check the SQL against them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agent.core.contract import format_timestamp
from agent.core.errors import ConfigError

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*", re.IGNORECASE)
_UNIT = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """The `store.retention` section of the config, with safe defaults.

    `batch_rows` bounds each pruning transaction (rows examined), so the
    recorder never waits long for the write lock; `vacuum_pages` bounds each
    `PRAGMA incremental_vacuum(N)` step. `duty` caps the share of wall time the
    pruner holds the write lock (it sleeps between batches accordingly), so a
    busy recorder keeps most of it. `high_water` is the share of the size
    budget at which `status` and the log warn.
    """

    arrivals: timedelta = timedelta(days=30)
    payloads: timedelta = timedelta(days=90)
    keys: timedelta = timedelta(days=400)
    interval: timedelta = timedelta(minutes=15)
    batch_rows: int = 2000
    vacuum_pages: int = 1024
    duty: float = 0.2
    high_water: float = 0.8


DEFAULTS = RetentionSettings()


def parse_duration(value: Any, key: str) -> timedelta:
    """`30d`, `12h`, `15m`, `90s`, `2w`, `500ms` -> timedelta; ConfigError naming `key` otherwise."""
    if isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        return float(m.group(1)) * _UNIT[m.group(2).lower()]
    raise ConfigError(
        f"{key}: {value!r} is not a duration; write a number and a unit, e.g. 30d, 12h, 15m, 90s"
    )


def _number(value: Any, key: str, kind: type, low: float, high: float) -> Any:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (kind is int and not isinstance(value, int))
    ):
        raise ConfigError(f"{key}: {value!r} is not {'an integer' if kind is int else 'a number'}")
    if not low <= value <= high:
        raise ConfigError(f"{key}: {value!r} must be between {low:g} and {high:g}")
    return value


def parse_retention(doc: Mapping[str, Any] | None, where: str = "store.retention") -> RetentionSettings:
    """Build RetentionSettings from a plain mapping (the YAML section); missing keys keep defaults.

    Raises ConfigError naming the key (`store.retention.keys: ...`) for an
    unknown key, a bad unit, or horizons in the wrong order.
    """
    if doc is None:
        return DEFAULTS
    if not isinstance(doc, Mapping):
        raise ConfigError(
            f"{where}: must be a mapping (arrivals, payloads, keys, ...), not {type(doc).__name__}"
        )
    known = set(RetentionSettings.__dataclass_fields__)
    for name in doc:
        if name not in known:
            raise ConfigError(f"{where}.{name}: unknown setting; known: {', '.join(sorted(known))}")
    got: dict[str, Any] = {}
    for name in ("arrivals", "payloads", "keys", "interval"):
        if name in doc:
            got[name] = parse_duration(doc[name], f"{where}.{name}")
            if got[name] <= timedelta(0):
                raise ConfigError(f"{where}.{name}: must be longer than zero")
    if "batch_rows" in doc:
        got["batch_rows"] = _number(doc["batch_rows"], f"{where}.batch_rows", int, 10, 100_000)
    if "vacuum_pages" in doc:
        got["vacuum_pages"] = _number(doc["vacuum_pages"], f"{where}.vacuum_pages", int, 1, 1_000_000)
    if "duty" in doc:
        got["duty"] = float(_number(doc["duty"], f"{where}.duty", float, 0.01, 1.0))
    if "high_water" in doc:
        got["high_water"] = float(_number(doc["high_water"], f"{where}.high_water", float, 0.05, 1.0))
    settings = RetentionSettings(**got)
    check_order(settings, where)
    return settings


def check_order(s: RetentionSettings, where: str = "store.retention") -> None:
    """The arrival log never outlives its canonical event; keys outlive payloads."""
    if s.arrivals > s.payloads:
        raise ConfigError(
            f"{where}.arrivals: {days_text(s.arrivals)} is longer than payloads ({days_text(s.payloads)}); "
            "the arrival log of an event cannot outlive the event"
        )
    if s.keys <= s.payloads:
        raise ConfigError(
            f"{where}.keys: {days_text(s.keys)} must be longer than payloads ({days_text(s.payloads)}), "
            "and longer than the longest possible replay delay (see docs/retention.md)"
        )


def days_text(t: timedelta) -> str:
    return f"{t.total_seconds() / 86400:g}d"


# --- cutoffs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Records whose (last) arrival is strictly before these instants are past their horizon."""

    arrivals: str
    payloads: str
    keys: str


def cutoffs(settings: RetentionSettings, now: datetime) -> Cutoffs:
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

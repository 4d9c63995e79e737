"""Salvage: a new store takes over what can still be read from the damaged one it replaces.

When the store fails to open or fails `PRAGMA quick_check`, the service moves the file aside
and starts a new store (`agent.service.run.open_store`). Before anything else is written,
`salvage_into` reads the moved-aside file (`agent.store.salvage_read`) and copies into the
new store:

* the upstreams (so `backfill: all` is not applied a second time),
* the tracker state: `device_state` (the last boot seen live per device), the resume points
  (`channel_positions`, `ring_positions`) and every readable BootObserved record (so a boot
  seen before is not announced again, and `previous_bootId` of the next boot is the real one),
* every undelivered outbox row whose record could be read, with that record: a canonical
  event keeps its key (source, transitionId, bootId), payload and source time, and gets a
  new canonical id and one arrival (receiver `salvage`, arrival time = its first arrival);
  gaps and anomalies keep their ids upstream; an identity-incomplete arrival is recorded
  again from its raw bytes (its id upstream is the new store id + its new arrival id);
  the outbox row keeps its upstream, its attempt count and its place in the order.

The outbox is taken in rowid ranges of 2,000, each range with its records in one
transaction, so memory stays flat however large the backlog (the caller makes the whole
salvage atomic: it salvages into a new file and renames it into place when done).

A canonical event whose stored payload hash does not match its payload is not taken (the
damage reached its content): it is counted as unreadable. Delivered rows are not taken.
Salvaged rows are pending when the forwarders start, so they go upstream with
`replayed: true` and the same (source, id): receivers deduplicate them.

What could not be read is counted, never guessed: rowids whose lookup failed (a failed
outbox rowid may have been delivered or not: unknown), and undelivered outbox rows that
could not be taken over because their record was unreadable or invalid. The counts are
returned, logged by the caller, shown by `status` and kept in the store (`store_meta` row
`salvage`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiosqlite

from agent.core.basis import IdentityBasis
from agent.core.contract import Decision, Delivery, Key, payload_hash_of_text
from agent.core.errors import StoreError, StoreFull
from agent.core.intake import parse_delivery
from agent.core.jcs import canonical_json
from agent.store.batch import queue_outbox, read_marks, record_batch
from agent.store.connection import on_thread
from agent.store.salvage_read import (
    ANOMALY_COLUMNS,
    BOOT_COLUMNS,
    OUTBOX_COLUMNS,
    DamagedStore,
    Rows,
)
from agent.store.store import Store

log = logging.getLogger(__name__)

RECEIVER = "salvage"
BASES = frozenset(b.value for b in IdentityBasis)
STEP = 2000  # outbox rowids of the damaged file per transaction: memory stays flat


@dataclass(frozen=True, slots=True)
class SalvageReport:
    """What a new store took from the damaged one, and what could not be read."""

    damaged_file: str
    outbox_rows: int  # outbox rows in the new store: undelivered ones taken over + last events'
    events: int  # canonical events taken over with undelivered outbox rows
    last_events: int  # delivered events taken as the last one recorded per source and bootId (sent again)
    positions: int  # tracker resume points: last transitionId per channel and boot, ring heads
    boots: int
    anomalies: int  # gaps and anomalies
    identity_incomplete: int
    device_state: int
    unreadable_rows: int  # rowids whose lookup failed in the damaged file (any table)
    outbox_rows_lost: int  # undelivered outbox rows not taken: their record was unreadable or invalid
    problem: str | None  # e.g. the header was rebuilt, or nothing could be opened

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        text = (
            f"salvaged {self.outbox_rows} outbox rows ({self.events} undelivered events, "
            f"{self.anomalies} gaps/anomalies, {self.identity_incomplete} identity-incomplete, "
            f"{self.last_events} delivered last events per source and boot, sent again), "
            f"{self.boots} boots, {self.device_state} device states, {self.positions} resume positions; "
            f"{self.unreadable_rows} rows could not be read; "
            f"{self.outbox_rows_lost} undelivered outbox rows could not be taken over"
        )
        return f"{text} ({self.problem})" if self.problem else text


@dataclass
class _Taken:
    boots: dict[int, int] = field(default_factory=dict)  # old boot row -> new
    arrivals: dict[int, int] = field(default_factory=dict)  # old arrival id -> new
    events: int = 0
    last_events: int = 0
    positions: int = 0
    anomalies: int = 0
    outbox_rows: int = 0
    outbox_rows_lost: int = 0


Progress = Callable[[int], None]


async def salvage_into(
    store: Store, damaged: str, now: str, progress: Progress | None = None
) -> SalvageReport:
    """Copy what can be read from the damaged store file `damaged` into the new `store`.

    `progress` is called after every range with the outbox rows taken so far (the service
    tells systemd the start is still going: a large backlog takes a while)."""
    dam = await asyncio.to_thread(DamagedStore, damaged)
    try:
        taken, device_states = await _salvage(store, dam, os.path.basename(damaged), now, progress)
    finally:
        await asyncio.to_thread(dam.close)
    report = SalvageReport(
        damaged_file=damaged,
        outbox_rows=taken.outbox_rows,
        events=taken.events,
        last_events=taken.last_events,
        positions=taken.positions,
        boots=len(taken.boots),
        anomalies=taken.anomalies,
        identity_incomplete=len(taken.arrivals),
        device_state=device_states,
        unreadable_rows=sum(dam.unreadable.values()),
        outbox_rows_lost=taken.outbox_rows_lost,
        problem=dam.problem,
    )
    async with store._lock, store._transaction():
        await store.db.execute(
            "INSERT INTO store_meta(name, value) VALUES ('salvage', ?)"
            " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (json.dumps({**report.as_dict(), "at": now}),),
        )
    return report


async def _salvage(
    store: Store, dam: DamagedStore, damaged: str, now: str, progress: Progress | None
) -> tuple[_Taken, int]:
    t = asyncio.to_thread
    upstreams = await t(dam.scan, "upstreams", "name, backfill, added_at")
    device_state = await t(dam.scan, "device_state", "device, last_live_boot")
    boots = await t(dam.scan, "boots", BOOT_COLUMNS)
    channels = await t(dam.whole_table, "channel_positions", "source, boot_id, transition_id")
    rings = await t(dam.whole_table, "ring_positions", "device, head")
    taken = _Taken()
    async with store._lock, store._transaction():
        db = store.db
        await db.executemany(
            "INSERT OR IGNORE INTO upstreams(name, backfill, added_at) VALUES (?,?,?)",
            list(upstreams.values()),
        )
        await db.executemany(
            "INSERT INTO device_state(device, last_live_boot) VALUES (?,?)"
            " ON CONFLICT(device) DO UPDATE SET last_live_boot = excluded.last_live_boot",
            list(device_state.values()),
        )
        taken.boots.update(await _boots(db, boots))
        # where each poller stood (the resume points): the next start resumes from the old store's
        await db.executemany(
            "INSERT OR IGNORE INTO channel_positions(source, boot_id, transition_id) VALUES (?,?,?)", channels
        )
        await db.executemany("INSERT OR IGNORE INTO ring_positions(device, head) VALUES (?,?)", rings)
        taken.positions = len(channels) + len(rings)
    for lo, hi in await t(lambda: list(dam.ranges("outbox", STEP))):
        rows = await t(dam.scan_range, "outbox", OUTBOX_COLUMNS, lo, hi, "state = 'pending'")
        if rows:
            kept = replace(taken, boots=dict(taken.boots), arrivals=dict(taken.arrivals))
            try:
                await _take_range(store, dam, rows, taken, damaged, now)
            except StoreFull:
                raise  # the new store's disk is full: the whole salvage is done again at the next start
            except StoreError as exc:  # rolled back: this range's rows are counted, the rest goes on
                log.error("salvage: %d outbox rows of %s could not be taken: %s", len(rows), damaged, exc)
                taken = replace(kept, outbox_rows_lost=kept.outbox_rows_lost + len(rows))
            if progress is not None:
                progress(taken.outbox_rows)
    # After the outbox: the last recorded event per (source, bootId) that is not in the new store
    # yet (it was delivered), so the tracker state read at the next start is the old store's.
    # It gets outbox rows like every canonical event: sent once more, replayed, same id.
    latest = await t(dam.latest_events)
    async with store._lock, store._transaction():
        before = taken.events
        added = await _deliveries(store.db, store.path, latest, {}, taken, damaged, now)
        taken.last_events, taken.events = taken.events - before, before
        # Every canonical event has its outbox rows: these go out once more (replayed, same id).
        names = [str(u[0]) for u in upstreams.values()]
        refs = [("transition", cid) for cid in added.new]
        await on_thread(store.db, lambda conn: queue_outbox(conn, names, refs, now))
        taken.outbox_rows += len(names) * len(added.new)
    return taken, len(device_state)


async def _take_range(
    store: Store, dam: DamagedStore, rows: Rows, taken: _Taken, damaged: str, now: str
) -> None:
    """One range of pending outbox rows with their records, in one transaction."""
    t = asyncio.to_thread
    refs: dict[str, set[int]] = {}
    for _upstream, kind, ref_id, *_ in rows.values():
        refs.setdefault(str(kind), set()).add(int(ref_id))
    events = await t(dam.lookup, "events", dam.event_columns, refs.get("transition", set()))
    anomalies = await t(
        dam.lookup, "anomalies", ANOMALY_COLUMNS, refs.get("gap", set()) | refs.get("anomaly", set())
    )
    wanted = refs.get("identity_incomplete", set()) - set(taken.arrivals)
    arrivals = await t(dam.lookup, "arrivals", dam.arrival_columns, wanted)
    more_boots = await t(
        dam.lookup, "boots", BOOT_COLUMNS, refs.get("boot_observed", set()) - set(taken.boots)
    )
    async with store._lock, store._transaction():
        db = store.db
        taken.boots.update(await _boots(db, more_boots))
        new_anomalies = await _anomalies(db, anomalies)
        new_events = await _deliveries(db, store.path, events, arrivals, taken, damaged, now)
        taken.anomalies += len(new_anomalies)
        out = []
        for _oid, (upstream, kind, ref_id, attempts, last_error, created_at) in sorted(rows.items()):
            new = {
                "transition": new_events,
                "boot_observed": taken.boots,
                "gap": new_anomalies,
                "anomaly": new_anomalies,
                "identity_incomplete": taken.arrivals,
            }.get(str(kind), {}).get(int(ref_id))
            if new is None:
                taken.outbox_rows_lost += 1
                continue
            out.append((upstream, kind, new, attempts, last_error, created_at))
        await db.executemany(
            "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, attempts, last_error, created_at)"
            " VALUES (?,?,?,?,?,?)",
            out,
        )
        taken.outbox_rows += len(out)


async def _boots(db: aiosqlite.Connection, boots: Rows) -> dict[int, int]:
    """Insert these boot rows (old row id -> row) unless known; old row id -> new row id."""
    if not boots:
        return {}
    await db.executemany(
        "INSERT OR IGNORE INTO boots(device, boot_id, previous_boot_id, first_arrival, source_ts, live,"
        " arrival_id, evidence) VALUES (?,?,?,?,?,?,NULL,?)",
        [boots[k] for k in sorted(boots)],
    )
    rows = await db.execute_fetchall("SELECT device, boot_id, boot_row FROM boots")
    new = {(r[0], r[1]): int(r[2]) for r in rows}
    return {k: new[(v[0], v[1])] for k, v in boots.items() if (v[0], v[1]) in new}


async def _anomalies(db: aiosqlite.Connection, anomalies: Rows) -> dict[int, int]:
    """Insert these gap/anomaly rows unless known; old id -> new id."""
    if not anomalies:
        return {}
    await db.executemany(
        "INSERT OR IGNORE INTO anomalies(source, boot_id, kind, from_value, to_value, detected_at, evidence)"
        " VALUES (?,?,?,?,?,?,?)",
        [anomalies[k] for k in sorted(anomalies)],
    )
    out: dict[int, int] = {}
    for old_id, v in anomalies.items():
        found = list(
            await db.execute_fetchall(
                "SELECT anomaly_id FROM anomalies WHERE source = ? AND boot_id = ? AND kind = ?"
                " AND from_value = ? AND to_value = ?",
                v[:5],
            )
        )
        if found:
            out[old_id] = int(found[0][0])
    return out


async def _known(db: aiosqlite.Connection, keys: list[Key]) -> dict[Key, int]:
    """Canonical ids of the keys the new store already holds (salvaged for another upstream)."""
    out: dict[Key, int] = {}
    for start in range(0, len(keys), 300):
        chunk = keys[start : start + 300]
        values = ",".join("(?,?,?)" for _ in chunk)
        params = [p for k in chunk for p in (k.source, k.transition_id, k.boot_id)]
        sql = (
            f"WITH k(s, t, b) AS (VALUES {values}) SELECT e.source, e.transition_id, e.boot_id,"
            " e.canonical_id FROM k JOIN events e"
            " ON e.source = k.s AND e.transition_id = k.t AND e.boot_id = k.b"
        )
        for r in await db.execute_fetchall(sql, params):
            out[Key(r[0], r[1], r[2])] = int(r[3])
    return out


class _Mapping(dict[int, int]):
    """Old canonical id -> new; `new` lists the canonical ids this call created."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[int] = []


async def _deliveries(
    db: aiosqlite.Connection, path: str, events: Rows, arrivals: Rows, taken: _Taken, damaged: str, now: str
) -> _Mapping:
    """Record the salvaged events and identity-incomplete arrivals through the normal batch;
    old canonical id -> new canonical id (also for events the new store already holds)."""
    made = {cid: _event_delivery(row, damaged) for cid, row in sorted(events.items())}
    valid = {cid: d for cid, d in made.items() if d is not None and d.key is not None}
    known = await _known(db, [d.key for d in valid.values() if d.key is not None])
    mapping = _Mapping()
    mapping.update({cid: known[d.key] for cid, d in valid.items() if d.key in known})
    items: list[Delivery] = []
    origin: list[tuple[str, int]] = []
    for cid, d in valid.items():
        if cid not in mapping:
            items.append(d)
            origin.append(("event", cid))
    for aid in sorted(arrivals):
        items.append(_incomplete_delivery(arrivals[aid]))
        origin.append(("arrival", aid))
    if not items:
        return mapping
    marks, outcomes = await on_thread(
        db, lambda conn: (read_marks(conn), record_batch(conn, path, items, [], [], now, []))
    )
    for i, ((what, old_id), oc) in enumerate(zip(origin, outcomes, strict=True)):
        if what == "event" and oc.canonical_id is not None:
            mapping[old_id] = oc.canonical_id
            mapping.new.append(oc.canonical_id)
            taken.events += 1
        elif what == "arrival" and oc.decision is Decision.IDENTITY_INCOMPLETE:
            taken.arrivals[old_id] = marks.last_arrival_id + 1 + i
    return mapping


def _event_delivery(row: tuple[Any, ...], damaged: str) -> Delivery | None:
    """The delivery that re-creates a salvaged canonical event, or None when its content is invalid."""
    source, tid, boot, source_ts, payload_json, stored_hash, first_arrival, basis = row
    if basis not in BASES:
        return None
    try:
        if payload_hash_of_text(payload_json, source_ts) != stored_hash:
            return None
        payload = json.loads(payload_json)
    except (TypeError, ValueError):
        return None
    if not (isinstance(payload, dict) and source and tid and boot and isinstance(first_arrival, str)):
        return None
    raw = canonical_json(
        {
            "source": source,
            "transitionId": tid,
            "bootId": boot,
            "sourceTimestamp": source_ts,
            "payload": payload,
            "salvagedFrom": damaged,
        }
    )
    return Delivery(
        source,
        tid,
        boot,
        source_ts,
        first_arrival,
        payload,
        stored_hash,
        raw,
        RECEIVER,
        live=False,
        payload_json=payload_json,
        basis=str(basis),
    )


def _incomplete_delivery(row: tuple[Any, ...]) -> Delivery:
    """An identity-incomplete arrival recorded again: from its raw line when that parses."""
    source, tid, boot, source_ts, arrival_at, receiver, raw, line, basis = row
    basis = basis if basis in BASES else IdentityBasis.COUNTER
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    parsed = parse_delivery(text, arrival_at=arrival_at, receiver=receiver)
    if isinstance(parsed, Delivery) and parsed.key is None:
        return Delivery(
            parsed.source,
            parsed.transition_id,
            parsed.boot_id,
            parsed.source_timestamp,
            arrival_at,
            parsed.payload,
            parsed.payload_hash,
            raw,
            receiver,
            live=False,
            line=line,
            missing=parsed.missing,
            basis=str(basis),
        )
    payload: dict[str, Any] = {}
    return Delivery(
        source,
        tid,
        boot,
        source_ts,
        arrival_at,
        payload,
        payload_hash_of_text("{}", source_ts),
        raw,
        receiver,
        live=False,
        line=line,
        missing=tuple(n for n, v in (("source", source), ("transitionId", tid), ("bootId", boot)) if not v),
        basis=str(basis),
    )

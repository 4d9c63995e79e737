"""Salvage: a new store takes over what can still be read from the damaged one it replaces.

When the store fails to open or fails `PRAGMA quick_check`, the service moves the file aside
and starts a new store (`agent.service.run.open_store`). Before anything else is written,
`salvage_into` reads the moved-aside file (`agent.store.salvage_read`) and copies into the
new store, in one transaction:

* the upstreams (so `backfill: all` is not applied a second time),
* the tracker state: `device_state` (the last boot seen live per device) and every readable
  BootObserved record (so a boot seen before is not announced again, and `previous_bootId`
  of the next boot is the real one),
* every undelivered outbox row whose record could be read, with that record: a canonical
  event keeps its key (source, transitionId, bootId), payload and source time, and gets a
  new canonical id and one arrival (receiver `salvage`, arrival time = its first arrival);
  gaps and anomalies keep their ids upstream; an identity-incomplete arrival is recorded
  again from its raw bytes (its id upstream is the new store id + its new arrival id);
  the outbox row keeps its upstream, its attempt count and its place in the order.

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
import os
from dataclasses import asdict, dataclass
from typing import Any

import aiosqlite

from agent.core.contract import Decision, Delivery, payload_hash_of_text
from agent.core.intake import parse_delivery
from agent.core.jcs import canonical_json
from agent.store.batch import read_marks, record_batch
from agent.store.salvage_read import OldStore, read_old_store
from agent.store.store import Store

RECEIVER = "salvage"


@dataclass(frozen=True, slots=True)
class SalvageReport:
    """What a new store took from the damaged one, and what could not be read."""

    damaged_file: str
    outbox_rows: int  # undelivered outbox rows taken over (one per record and upstream)
    events: int  # canonical events taken over (undelivered somewhere)
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
            f"salvaged {self.outbox_rows} undelivered outbox rows ({self.events} events, "
            f"{self.anomalies} gaps/anomalies, {self.identity_incomplete} identity-incomplete), "
            f"{self.boots} boots, {self.device_state} device states; "
            f"{self.unreadable_rows} rows could not be read; "
            f"{self.outbox_rows_lost} undelivered outbox rows could not be taken over"
        )
        return f"{text} ({self.problem})" if self.problem else text


@dataclass
class _Taken:
    events: dict[int, int]  # old canonical id -> new
    arrivals: dict[int, int]  # old arrival id -> new
    boots: dict[int, int]  # old boot row -> new
    anomalies: dict[int, int]  # old anomaly id -> new


async def salvage_into(store: Store, damaged: str, now: str) -> SalvageReport:
    """Copy what can be read from the damaged store file `damaged` into the new `store`."""
    old = await asyncio.to_thread(read_old_store, damaged)
    async with store._lock, store._transaction():
        report = await _write(store.db, store.path, old, damaged, now)
        await store.db.execute(
            "INSERT INTO store_meta(name, value) VALUES ('salvage', ?)"
            " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (json.dumps({**report.as_dict(), "at": now}),),
        )
    return report


async def _write(db: aiosqlite.Connection, path: str, old: OldStore, damaged: str, now: str) -> SalvageReport:
    await db.executemany(
        "INSERT OR IGNORE INTO upstreams(name, backfill, added_at) VALUES (?,?,?)", old.upstreams
    )
    await db.executemany(
        "INSERT INTO device_state(device, last_live_boot) VALUES (?,?)"
        " ON CONFLICT(device) DO UPDATE SET last_live_boot = excluded.last_live_boot",
        old.device_state,
    )
    taken = _Taken({}, {}, await _boots(db, old), await _anomalies(db, old))
    await _deliveries(db, path, old, taken, os.path.basename(damaged), now)
    rows, missing = [], 0
    for _oid, (upstream, kind, ref_id, attempts, last_error, created_at) in sorted(old.outbox.items()):
        new = _new_ref(taken, str(kind), int(ref_id))
        if new is None:
            missing += 1
            continue
        rows.append((upstream, kind, new, attempts, last_error, created_at))
    await db.executemany(
        "INSERT OR IGNORE INTO outbox(upstream, kind, ref_id, attempts, last_error, created_at)"
        " VALUES (?,?,?,?,?,?)",
        rows,
    )
    return SalvageReport(
        damaged_file=damaged,
        outbox_rows=len(rows),
        events=len(taken.events),
        boots=len(taken.boots),
        anomalies=len(taken.anomalies),
        identity_incomplete=len(taken.arrivals),
        device_state=len(old.device_state),
        unreadable_rows=sum(old.unreadable.values()),
        outbox_rows_lost=missing,
        problem=old.problem,
    )


def _new_ref(taken: _Taken, kind: str, ref_id: int) -> int | None:
    table = {
        "transition": taken.events,
        "boot_observed": taken.boots,
        "gap": taken.anomalies,
        "anomaly": taken.anomalies,
        "identity_incomplete": taken.arrivals,
    }.get(kind, {})
    return table.get(ref_id)


async def _boots(db: aiosqlite.Connection, old: OldStore) -> dict[int, int]:
    await db.executemany(
        "INSERT OR IGNORE INTO boots(device, boot_id, previous_boot_id, first_arrival, source_ts, live,"
        " arrival_id, evidence) VALUES (?,?,?,?,?,?,NULL,?)",
        [old.boots[k] for k in sorted(old.boots)],
    )
    rows = await db.execute_fetchall("SELECT device, boot_id, boot_row FROM boots")
    new = {(r[0], r[1]): int(r[2]) for r in rows}
    return {k: new[(v[0], v[1])] for k, v in old.boots.items() if (v[0], v[1]) in new}


async def _anomalies(db: aiosqlite.Connection, old: OldStore) -> dict[int, int]:
    await db.executemany(
        "INSERT OR IGNORE INTO anomalies(source, boot_id, kind, from_value, to_value, detected_at, evidence)"
        " VALUES (?,?,?,?,?,?,?)",
        [old.anomalies[k] for k in sorted(old.anomalies)],
    )
    rows = await db.execute_fetchall(
        "SELECT source, boot_id, kind, from_value, to_value, anomaly_id FROM anomalies"
    )
    new = {tuple(r[:5]): int(r[5]) for r in rows}
    return {k: new[tuple(v[:5])] for k, v in old.anomalies.items() if tuple(v[:5]) in new}


async def _deliveries(
    db: aiosqlite.Connection, path: str, old: OldStore, taken: _Taken, damaged: str, now: str
) -> None:
    """Record the salvaged events and identity-incomplete arrivals through the normal batch."""
    items: list[Delivery] = []
    origin: list[tuple[str, int]] = []
    for cid in sorted(old.events):
        item = _event_delivery(old.events[cid], damaged)
        if item is None:
            continue  # its outbox rows are counted as not taken
        items.append(item)
        origin.append(("event", cid))
    for aid in sorted(old.arrivals):
        items.append(_incomplete_delivery(old.arrivals[aid]))
        origin.append(("arrival", aid))
    if not items:
        return
    marks = await read_marks(db)
    outcomes = await record_batch(db, path, items, [], [], now, [])
    for i, ((what, old_id), oc) in enumerate(zip(origin, outcomes, strict=True)):
        if what == "event" and oc.canonical_id is not None:
            taken.events[old_id] = oc.canonical_id
        elif what == "arrival" and oc.decision is Decision.IDENTITY_INCOMPLETE:
            taken.arrivals[old_id] = marks.last_arrival_id + 1 + i


def _event_delivery(row: tuple[Any, ...], damaged: str) -> Delivery | None:
    """The delivery that re-creates a salvaged canonical event, or None when its content is invalid."""
    source, tid, boot, source_ts, payload_json, stored_hash, first_arrival = row
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
    )


def _incomplete_delivery(row: tuple[Any, ...]) -> Delivery:
    """An identity-incomplete arrival recorded again: from its raw line when that parses."""
    source, tid, boot, source_ts, arrival_at, receiver, raw, line = row
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
    )

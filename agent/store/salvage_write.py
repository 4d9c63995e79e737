"""Salvage's writes into the new store: boots, gaps and anomalies, and the canonical events and
identity-incomplete arrivals re-created through the normal batch (`agent.store.batch`), each
old id mapped to its new one. `agent.store.salvage` reads the damaged file and calls these
inside its transactions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from agent.core.basis import IdentityBasis
from agent.core.contract import Decision, Delivery, Key, payload_hash_of_text
from agent.core.intake import parse_delivery
from agent.core.jcs import canonical_json
from agent.store.batch import keyed_events, read_marks, record_batch
from agent.store.connection import on_thread
from agent.store.salvage_read import Rows

RECEIVER = "salvage"
BASES = frozenset(b.value for b in IdentityBasis)


@dataclass
class Taken:
    boots: dict[int, int] = field(default_factory=dict)  # old boot row -> new
    arrivals: dict[int, int] = field(default_factory=dict)  # old arrival id -> new
    events: int = 0
    last_events: int = 0
    positions: int = 0
    anomalies: int = 0
    outbox_rows: int = 0
    outbox_rows_lost: int = 0


async def insert_boots(db: aiosqlite.Connection, boots: Rows) -> dict[int, int]:
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


async def insert_anomalies(db: aiosqlite.Connection, anomalies: Rows) -> dict[int, int]:
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
        sql, params = keyed_events(chunk, "e.source, e.transition_id, e.boot_id, e.canonical_id")
        for r in await db.execute_fetchall(sql, params):
            out[Key(r[0], r[1], r[2])] = int(r[3])
    return out


class IdMap(dict[int, int]):
    """Old canonical id -> new; `new` lists the canonical ids this call created."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[int] = []


async def record_deliveries(
    db: aiosqlite.Connection, path: str, events: Rows, arrivals: Rows, taken: Taken, damaged: str, now: str
) -> IdMap:
    """Record the salvaged events and identity-incomplete arrivals through the normal batch;
    old canonical id -> new canonical id (also for events the new store already holds)."""
    made = {cid: _event_delivery(row, damaged) for cid, row in sorted(events.items())}
    valid = {cid: d for cid, d in made.items() if d is not None and d.key is not None}
    known = await _known(db, [d.key for d in valid.values() if d.key is not None])
    mapping = IdMap()
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

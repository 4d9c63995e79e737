"""Writes of the record transaction for boots and anomalies: BootObserved rows, the latest live
boot per device, gap and anomaly rows.

Runs inside the caller's transaction, on the connection's thread (plain sqlite3, see
`agent.store.batch`); which boots are new is decided by `agent.core.decide`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from agent.core import decide
from agent.core.contract import Anomaly
from agent.core.jcs import canonical_json
from agent.core.records import BootObserved

log = logging.getLogger(__name__)


def record_boots(
    db: sqlite3.Connection,
    sightings: list[decide.BootSighting],
    arrival_ids: list[int],
    known: set[tuple[str, str]] | None = None,
) -> list[int]:
    """BootObserved rows for the boots not seen before; returns their row ids. `known`: the
    sightings' (device, bootId) pairs the store holds already, when the caller has read them."""
    if not sightings:
        return []
    pairs = list(dict.fromkeys((s.device, s.boot_id) for s in sightings))
    if known is None:
        known = known_boots(db, pairs)
    if len(known) == len(pairs):
        return []
    devices = sorted({d for d, _ in pairs})
    marks = ",".join("?" for _ in devices)
    last = db.execute(
        f"SELECT device, last_live_boot FROM device_state WHERE device IN ({marks})", devices
    ).fetchall()
    records, changed = decide.new_boots(sightings, known, {r[0]: r[1] for r in last})
    # new_boots makes each record from the first sighting of its (device, bootId)
    index_of = {(s.device, s.boot_id): s.index for s in reversed(sightings)}
    ids = [_insert_boot(db, rec, index_of[(rec.device, rec.boot_id)], arrival_ids) for rec in records]
    if changed:
        db.executemany(
            "INSERT INTO device_state(device, last_live_boot) VALUES (?,?)"
            " ON CONFLICT(device) DO UPDATE SET last_live_boot = excluded.last_live_boot",
            list(changed.items()),
        )
    return ids


def _insert_boot(db: sqlite3.Connection, rec: BootObserved, index: int | None, arrival_ids: list[int]) -> int:
    """Write one BootObserved row, linked to the arrival at `index` of the batch if any."""
    cur = db.execute(
        "INSERT INTO boots(device, boot_id, previous_boot_id, first_arrival, source_ts, live,"
        " arrival_id, evidence) VALUES (?,?,?,?,?,?,?,?)",
        (
            rec.device,
            rec.boot_id,
            rec.previous_boot_id,
            rec.first_arrival,
            rec.source_ts,
            int(rec.live),
            arrival_ids[index] if index is not None else None,
            rec.evidence_json,
        ),
    )
    log.info(
        "BootObserved device=%s boot_id=%s previous=%s live=%s",
        rec.device,
        rec.boot_id,
        rec.previous_boot_id,
        rec.live,
    )
    return int(cur.lastrowid or 0)


def known_boots(db: sqlite3.Connection, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    values = ",".join("(?,?)" for _ in pairs)
    found = db.execute(
        f"WITH p(d, b) AS (VALUES {values}) SELECT p.d, p.b FROM p JOIN boots"
        " ON boots.device = p.d AND boots.boot_id = p.b",
        [x for pair in pairs for x in pair],
    ).fetchall()
    return {(r[0], r[1]) for r in found}


def record_anomalies(db: sqlite3.Connection, anomalies: Sequence[Anomaly]) -> list[tuple[str, int]]:
    """Gap and anomaly rows (a repeat is ignored); returns (outbox kind, row id) of the new ones.

    A gap or overrun names only what the store does not hold: transitions of that source and
    boot already stored (delivered over another path, or earlier in this batch) are taken out,
    so a range may shrink, split or vanish. Each new row is logged once, here.
    """
    refs: list[tuple[str, int]] = []
    for a in [piece for given in anomalies for piece in _still_missing(db, given)]:
        cur = db.execute(
            "INSERT OR IGNORE INTO anomalies(source, boot_id, kind, from_value, to_value, detected_at,"
            " evidence) VALUES (?,?,?,?,?,?,?)",
            (a.source, a.boot_id, a.kind, a.first, a.last, a.detected_at, canonical_json(a.evidence)),
        )
        if cur.rowcount:
            refs.append(("gap" if a.kind == "gap" else "anomaly", int(cur.lastrowid or 0)))
            log.warning("%s source=%s boot_id=%s from=%s to=%s", a.kind, a.source, a.boot_id, a.first, a.last)
    return refs


def _still_missing(db: sqlite3.Connection, a: Anomaly) -> list[Anomaly]:
    """`a` itself, or for a gap/overrun the parts of its range the store holds no event of."""
    if a.kind not in ("gap", "overrun") or not (a.first.isdigit() and a.last.isdigit()):
        return [a]
    lo, hi = int(a.first), int(a.last)
    found = db.execute(
        "SELECT CAST(transition_id AS INTEGER) AS t FROM events WHERE source = ? AND boot_id = ?"
        " AND t BETWEEN ? AND ? UNION SELECT CAST(transition_id AS INTEGER) AS t FROM event_keys"
        " WHERE source = ? AND boot_id = ? AND t BETWEEN ? AND ?",
        (a.source, a.boot_id, lo, hi, a.source, a.boot_id, lo, hi),
    ).fetchall()
    held = sorted(int(r[0]) for r in found)
    if not held:
        return [a]
    out, start = [], lo
    for t in held:
        if t > start:
            out.append(replace(a, first=str(start), last=str(t - 1)))
        start = t + 1
    if start <= hi:
        out.append(replace(a, first=str(start), last=str(hi)))
    return out

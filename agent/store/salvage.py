"""Salvage: a new store takes over what can still be read from the damaged one it replaces.

When the store fails to open or fails `PRAGMA quick_check`, the service moves the file aside and
starts a new store (`agent.service.run.open_store`). Before anything else is written,
`salvage_into` reads the moved-aside file (`agent.store.salvage_read`) and copies into the new
store (`agent.store.salvage_write`) the upstreams, the tracker state and every undelivered
outbox row whose record could be read, with that record. What is taken and how: docs/
architecture.md, "Salvage".

Rules: the outbox is taken in rowid ranges of 2,000, so memory stays flat (the caller makes the
whole salvage atomic: a new file renamed into place). A canonical event whose payload hash does
not match its payload is not taken; delivered rows are not taken. Salvaged rows go upstream
again with `replayed: true` and the same (source, id). What could not be read is counted, never
guessed; the counts are returned, logged, shown by `status` and kept (`store_meta` `salvage`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from agent.core.errors import StoreError, StoreFull
from agent.store.connection import on_thread
from agent.store.outbox_queue import queue_outbox
from agent.store.salvage_read import (
    ANOMALY_COLUMNS,
    BOOT_COLUMNS,
    OUTBOX_COLUMNS,
    DamagedStore,
    Rows,
)
from agent.store.salvage_write import Taken, insert_anomalies, insert_boots, record_deliveries
from agent.store.store import Store

log = logging.getLogger(__name__)

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
) -> tuple[Taken, int]:
    t = asyncio.to_thread
    upstreams = await t(dam.scan, "upstreams", "name, backfill, added_at")
    device_state = await t(dam.scan, "device_state", "device, last_live_boot")
    boots = await t(dam.scan, "boots", BOOT_COLUMNS)
    channels = await t(dam.whole_table, "channel_positions", "source, boot_id, transition_id")
    rings = await t(dam.whole_table, "ring_positions", "device, head")
    taken = Taken()
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
        taken.boots.update(await insert_boots(db, boots))
        # where each poller stood (the resume points): the next start resumes from the old store's
        await db.executemany(
            "INSERT OR IGNORE INTO channel_positions(source, boot_id, transition_id) VALUES (?,?,?)", channels
        )
        await db.executemany("INSERT OR IGNORE INTO ring_positions(device, head) VALUES (?,?)", rings)
        taken.positions = len(channels) + len(rings)
    for lo, hi in await t(lambda: list(dam.ranges("outbox", STEP))):
        rows = await t(dam.scan_range, "outbox", OUTBOX_COLUMNS, lo, hi, "state IN ('pending', 'sent')")
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
        added = await record_deliveries(store.db, store.path, latest, {}, taken, damaged, now)
        taken.last_events, taken.events = taken.events - before, before
        # Every canonical event has its outbox rows: these go out once more (replayed, same id).
        names = [str(u[0]) for u in upstreams.values()]
        refs = [("transition", cid) for cid in added.new]
        await on_thread(store.db, lambda conn: queue_outbox(conn, names, refs, now))
        taken.outbox_rows += len(names) * len(added.new)
    return taken, len(device_state)


async def _take_range(
    store: Store, dam: DamagedStore, rows: Rows, taken: Taken, damaged: str, now: str
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
        taken.boots.update(await insert_boots(db, more_boots))
        new_anomalies = await insert_anomalies(db, anomalies)
        new_events = await record_deliveries(db, store.path, events, arrivals, taken, damaged, now)
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

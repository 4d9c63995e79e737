"""Poller positions in the store: written with the reads that moved them, read back at start.

A poller's tracker says where it stands after each read (`agent.core.snapshot.Positions`);
the record transaction stores that next to the read's deliveries and gaps, so what is
committed and where the agent resumes from never disagree, whatever ends the process.
`resume_points` turns the stored positions into the trackers' starting points.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import aiosqlite

from agent.core.snapshot import Positions
from agent.core.tracker import Resume


def record_positions(db: sqlite3.Connection, positions: Sequence[Positions]) -> None:
    """Upsert each position in order (inside the caller's transaction, on the connection's thread):
    the last one wins."""
    channel_rows = [
        (f"{p.device}/{ch}", p.boot, tid)
        for p in positions
        if p.boot is not None
        for ch, tid in p.channels.items()
    ]
    if channel_rows:
        db.executemany(
            "INSERT INTO channel_positions(source, boot_id, transition_id) VALUES (?,?,?)"
            " ON CONFLICT(source, boot_id) DO UPDATE SET transition_id = excluded.transition_id",
            channel_rows,
        )
    ring_rows = [(p.device, p.ring_head) for p in positions if p.ring_head is not None]
    if ring_rows:
        db.executemany(
            "INSERT INTO ring_positions(device, head) VALUES (?,?)"
            " ON CONFLICT(device) DO UPDATE SET head = excluded.head",
            ring_rows,
        )


async def resume_points(db: aiosqlite.Connection, devices: Iterable[str]) -> dict[str, Resume]:
    """Per device: its last boot seen live, the last transitionId per channel in that boot, the
    ring head, the latest source time of each window channel's events. A device the store has
    never seen gets an empty `Resume` (a fresh start)."""
    out: dict[str, Resume] = {}
    for device in devices:
        boot_rows = list(
            await db.execute_fetchall("SELECT last_live_boot FROM device_state WHERE device = ?", (device,))
        )
        boot = str(boot_rows[0][0]) if boot_rows and boot_rows[0][0] is not None else None
        counters: dict[str, int] = {}
        if boot is not None:
            prefix = f"{device}/"
            found = await db.execute_fetchall(
                "SELECT source, transition_id FROM channel_positions"
                " WHERE boot_id = ? AND substr(source, 1, ?) = ?",
                (boot, len(prefix), prefix),
            )
            counters = {str(r[0])[len(prefix) :]: int(r[1]) for r in found}
        head_rows = list(
            await db.execute_fetchall("SELECT head FROM ring_positions WHERE device = ?", (device,))
        )
        head = int(head_rows[0][0]) if head_rows else None
        out[device] = Resume(boot, counters, head, await _window_times(db, device))
    return out


async def _window_times(db: aiosqlite.Connection, device: str) -> dict[str, str]:
    """Per window channel of ``device``: the latest source time of its events (contract text,
    normalised UTC with milliseconds, so text order is time order)."""
    prefix = f"{device}/"
    # A range on `source` (the first column of the events_key index), not a scan of every event:
    # '0' is the character after '/'.
    rows = await db.execute_fetchall(
        "SELECT source, MAX(source_ts) FROM events WHERE source >= ? AND source < ?"
        " AND identity_basis = 'window' AND source_ts IS NOT NULL GROUP BY source",
        (prefix, f"{device}0"),
    )
    return {str(r[0])[len(prefix) :]: str(r[1]) for r in rows if str(r[0]).startswith(prefix)}

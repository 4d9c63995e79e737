"""What the store remembers of a device's OPC UA alarms, for the first connect after a restart.

Holds the query behind :meth:`agent.store.store.Store.read_alarm_memory`: the latest alarm
arrival of the device (when the agent last heard from its alarms, and under which generation)
and, per alarm source, the state of its latest event by source time. Alarm arrivals are the
ones with ``via`` set; a partial index (``arrivals_alarms``) keeps this off the other arrivals.
"""

from __future__ import annotations

import json
from typing import Any

import aiosqlite

from agent.core.alarms import AlarmMemory, SeenCondition

# '/' is 0x2F and '0' 0x30: every source of the device sorts in [device + '/', device + '0').
RANGE = "via IS NOT NULL AND source >= ? AND source < ?"


def _active(raw: Any) -> bool:
    try:
        event = json.loads(raw)["event"]
    except (TypeError, ValueError, KeyError):
        return False
    return isinstance(event, dict) and event.get("ActiveState/Id") is True


async def alarm_memory(db: aiosqlite.Connection, device: str) -> AlarmMemory:
    bounds = (f"{device}/", f"{device}0")
    last = list(
        await db.execute_fetchall(
            f"SELECT arrival_at, boot_id FROM arrivals WHERE {RANGE}"
            " ORDER BY arrival_at DESC, arrival_id DESC LIMIT 1",
            bounds,
        )
    )
    if not last:
        return AlarmMemory()
    # SQLite: the bare columns of a max() aggregate come from the row that holds the maximum.
    rows = await db.execute_fetchall(
        f"SELECT source, max(coalesce(source_ts, '')), transition_id, boot_id, raw FROM arrivals"
        f" WHERE {RANGE} GROUP BY source",
        bounds,
    )
    conditions = tuple(
        SeenCondition(str(r[0]).split("/", 1)[1], r[1] or None, _active(r[4]), r[2], r[3]) for r in rows
    )
    return AlarmMemory(str(last[0][0]), last[0][1], conditions)

"""The outbox rows a record transaction adds: one per new record and upstream.

For an upstream whose forwarder runs in this process (`reserving`), the row is written with its
first attempt counted (`attempts = 1`), so the forwarder hands it out without a claim transaction
of its own (`agent.store.outbox`, `reserving`; docs/performance.md, "Flash"). Runs inside the
caller's transaction, on the connection's thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from agent.store import rows


def queue_outbox(
    db: sqlite3.Connection,
    upstreams: Sequence[str],
    refs: list[tuple[str, int]],
    now: str,
    reserving: Collection[str] = (),
) -> dict[str, int]:
    """One outbox row per new record and upstream; those of the `reserving` upstreams with their
    first attempt counted. Returns the first new row's id per reserving upstream."""
    if not refs:
        return {}
    if not reserving:
        db.executemany(rows.INSERT_OUTBOX, [(up, kind, ref, now) for kind, ref in refs for up in upstreams])
        return {}
    before = db.execute("SELECT coalesce(max(outbox_id), 0) FROM outbox").fetchone()[0]
    db.executemany(
        rows.INSERT_OUTBOX_ATTEMPTS,
        [(up, kind, ref, now, int(up in reserving)) for kind, ref in refs for up in upstreams],
    )
    found = db.execute(
        "SELECT upstream, min(outbox_id) FROM outbox WHERE outbox_id > ? AND attempts = 1 GROUP BY upstream",
        (before,),
    ).fetchall()
    return {str(r[0]): int(r[1]) for r in found if r[0] in reserving}

"""What a Sparkplug upstream keeps in the store: its `bdSeq`, and the live values its births
declare (spec sparkplug.md section 3).

`bdSeq` is kept in `store_meta` as `sparkplug.bdseq.<upstream>`: the value of the last MQTT
CONNECT. `next_bd_seq()` commits the next one (+1, 255 wraps to 0) *before* the CONNECT that
carries it in its Will, so a `kill -9` at any moment still gives the next CONNECT the previous
value + 1. `sparkplug_sends` keeps the bdSeq and seq of every attempt of a row (evidence: no
host acknowledges Sparkplug data). Nothing here knows the Sparkplug encoding; the values come
back as plain tuples.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.store.connection import WriterConnection

BD_SEQ_KEY = "sparkplug.bdseq."


class SparkplugStore:
    """The store's side of one Sparkplug upstream (on the store's writer connection and lock)."""

    def __init__(self, writer: WriterConnection, upstream: str) -> None:
        self.writer = writer
        self.upstream = upstream

    async def next_bd_seq(self) -> int:
        """The bdSeq of the next CONNECT, committed before it is used (0 the first time)."""
        w = self.writer
        key = BD_SEQ_KEY + self.upstream
        async with w.lock, w.transaction():
            rows = list(await w.db.execute_fetchall("SELECT value FROM store_meta WHERE name = ?", (key,)))
            value = 0 if not rows else (int(rows[0][0]) + 1) % 256
            await w.db.execute(
                "INSERT INTO store_meta(name, value) VALUES (?, ?)"
                " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (key, str(value)),
            )
        return value

    async def record_sends(self, sends: list[tuple[int, int, int, int, str]]) -> None:
        """Evidence of one published batch: (outbox_id, attempt, bdSeq, seq, sent_at) per row."""
        if not sends:
            return
        w = self.writer
        async with w.lock, w.transaction():
            await w.db.executemany(
                "INSERT OR REPLACE INTO sparkplug_sends(outbox_id, attempt, bd_seq, seq, sent_at)"
                " VALUES (?,?,?,?,?)",
                sends,
            )

    async def last_bd_seq(self) -> int | None:
        w = self.writer
        async with w.lock:
            rows = list(
                await w.db.execute_fetchall(
                    "SELECT value FROM store_meta WHERE name = ?", (BD_SEQ_KEY + self.upstream,)
                )
            )
        return int(rows[0][0]) if rows else None

    async def device_live(
        self, device: str, channels: Sequence[str]
    ) -> tuple[list[tuple[str, str | None, str | None]], str | None, str | None]:
        """(per channel: (channel, last payload JSON or None, its source time or first arrival),
        the device's current boot id or None, when that boot was first seen)."""
        w = self.writer
        states: list[tuple[str, str | None, str | None]] = []
        async with w.lock:
            for ch in channels:
                rows = list(
                    await w.db.execute_fetchall(
                        "SELECT payload, coalesce(source_ts, first_arrival) FROM events"
                        " WHERE source = ? ORDER BY canonical_id DESC LIMIT 1",
                        (f"{device}/{ch}",),
                    )
                )
                states.append((ch, rows[0][0], rows[0][1]) if rows else (ch, None, None))
            boot = list(
                await w.db.execute_fetchall(
                    "SELECT b.boot_id, coalesce(b.source_ts, b.first_arrival) FROM device_state d"
                    " JOIN boots b ON b.device = d.device AND b.boot_id = d.last_live_boot"
                    " WHERE d.device = ?",
                    (device,),
                )
            )
            if not boot:
                boot = list(
                    await w.db.execute_fetchall(
                        "SELECT boot_id, coalesce(source_ts, first_arrival) FROM boots"
                        " WHERE device = ? ORDER BY boot_row DESC LIMIT 1",
                        (device,),
                    )
                )
        return states, (boot[0][0] if boot else None), (boot[0][1] if boot else None)

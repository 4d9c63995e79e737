"""The least a durable recorder writes per event: the flash bench's baseline (a process of its own).

Written apart from the project's store code (no `agent` import): SQLite in WAL mode with
`synchronous=FULL`, one table of event rows (an identity and a body of --row-bytes, about 450
like the agent's records) with a unique identity index, group commits --interval apart with
the events that came meanwhile at --rate per second, and one transaction after each commit
marking its rows sent, as an upstream's acknowledgement would. SQLite's defaults otherwise
(4 KiB pages, a checkpoint each 1,000 WAL pages); --page-size gives it the agent's page size
and a checkpoint at the same WAL bytes, the agent's settings.

Runs --warm-up seconds, then counts `write_bytes` of /proc/self/io (what this process caused
to be written to storage) over --seconds and prints one JSON line:
{"events", "written_bytes", "seconds"}.

    python bench/flash_lean.py --db /var/tmp/lean.db --rate 40 --interval 0.05 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time


def write_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--rate", type=float, required=True, help="events per second")
    p.add_argument("--interval", type=float, required=True, help="seconds between commits")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--warm-up", type=float, default=5.0)
    p.add_argument("--row-bytes", type=int, default=450)
    p.add_argument("--page-size", type=int, default=None, help="default: SQLite's (4096)")
    a = p.parse_args()
    db = sqlite3.connect(a.db, isolation_level=None)
    if a.page_size:
        db.execute(f"PRAGMA page_size={a.page_size}")
        # a checkpoint at the same WAL bytes as SQLite's default of 1,000 pages of 4 KiB
        db.execute(f"PRAGMA wal_autocheckpoint={4 * 1024 * 1024 // a.page_size}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, source TEXT NOT NULL,"
        " transition_id INTEGER NOT NULL, boot_id TEXT NOT NULL, body TEXT NOT NULL,"
        " sent INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS events_key ON events(source, transition_id, boot_id)")
    sources = [f"PLC-{i:02d}/Trip" for i in range(10)]
    counters = dict.fromkeys(sources, 0)
    body = "x" * max(0, a.row_bytes - 60)
    start = time.monotonic()
    measure_at = start + a.warm_up
    end = measure_at + a.seconds
    made = 0.0  # events due so far (fractional)
    written = 0
    counted = 0
    began_bytes: int | None = None
    while True:
        now = time.monotonic()
        if began_bytes is None and now >= measure_at:
            began_bytes, counted = write_bytes(), 0
        if now >= end:
            break
        due = int((now - start) * a.rate) - int(made)
        if due > 0:
            rows = []
            for n in range(due):
                src = sources[(int(made) + n) % len(sources)]
                counters[src] += 1
                rows.append((src, counters[src], "17", body))
            made += due
            db.execute("BEGIN IMMEDIATE")
            first = db.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0]
            db.executemany("INSERT INTO events(source, transition_id, boot_id, body) VALUES (?,?,?,?)", rows)
            db.execute("COMMIT")
            db.execute("UPDATE events SET sent = 1 WHERE id BETWEEN ? AND ?", (first, first + len(rows) - 1))
            written += len(rows)
            counted += len(rows)
        time.sleep(max(0.0, a.interval - (time.monotonic() - now)))
    total = write_bytes() - (began_bytes or 0)
    db.close()
    print(json.dumps({"events": counted, "written_bytes": total, "seconds": a.seconds, "pid": os.getpid()}))


if __name__ == "__main__":
    main()

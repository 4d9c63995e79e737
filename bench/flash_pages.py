"""Where the agent's store writes go: WAL frames per commit, by table and index; prints one JSON line.

The scenario of `bench/flash.py` (one simulator with --plcs Modbus controllers making --rate
transitions a second, a Mosquitto of its own as the MQTT upstream, a fresh store), one agent
process at the config's defaults (or --interval). While it runs, the WAL file is copied every
--every seconds; each copy's valid frames (salts of its header) are read (24-byte frame
header: page number, and the database size on a commit frame), so every transaction's pages
are known even across checkpoints (a frame's salts and index name it once). At the end, the
store's `dbstat` table says which table or index each page belongs to.

Transactions are grouped by what they touched (`kinds`: the set of tables and indexes, named
by the most telling one: `arrivals` is a record commit, `outbox` alone a claim or a settle,
`live_state` a status write ...). For each: commits per second, and pages per commit by table
and index. A frame is page size + 24 bytes in the WAL, and the checkpoint writes each distinct
page of the WAL again into the database file (`checkpoint_pages_per_s`: distinct pages per WAL
generation over the window, an upper bound of what the checkpoint wrote).

    python bench/flash_pages.py                          # 10 PLCs, 40/s, 30 s
    python bench/flash_pages.py --interval 1s --seconds 20
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flash import start_broker, start_simulator, write_bytes, write_config  # noqa: E402

Frame = tuple[int, int]  # (page number, db size after commit or 0)


def wal_frames(data: bytes) -> tuple[tuple[int, int], int, list[Frame]]:
    """((salt1, salt2), page size, valid frames in order) of a WAL file's bytes."""
    if len(data) < 32:
        return (0, 0), 0, []
    _magic, _ver, page, _ckpt, s1, s2 = struct.unpack(">IIIIII", data[:24])
    frames: list[Frame] = []
    at = 32
    while at + 24 + page <= len(data):
        pno, size, f1, f2 = struct.unpack(">IIII", data[at : at + 16])
        if (f1, f2) != (s1, s2):
            break  # a frame of an earlier generation: the valid ones end here
        frames.append((pno, size))
        at += 24 + page
    return (s1, s2), page, frames


def page_names(db: Path) -> dict[int, str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {int(p): str(n) for n, p in con.execute("SELECT name, pageno FROM dbstat")}
    finally:
        con.close()


def kind_of(names: set[str]) -> str:
    for telling in ("arrivals", "sparkplug_sends", "live_state", "channel_positions", "ring_positions"):
        if telling in names:
            return telling
    return "+".join(sorted(names)) or "(none)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plcs", type=int, default=10)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--poll", default="100ms")
    p.add_argument("--interval", default=None, help="store.commit_interval (default: the config's)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warm-up", type=float, default=8.0)
    p.add_argument("--every", type=float, default=0.2, help="seconds between copies of the WAL")
    p.add_argument("--dir", default="/var/tmp")
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="flash-pages-", dir=a.dir))
    names = [f"PLC-{i:02d}" for i in range(a.plcs)]
    broker, port = start_broker(base)
    sim, ready = start_simulator(names, a.rate)
    config = write_config(base, names, ready, port, a.poll, a.interval)
    db, wal = base / "events.db", base / "events.db-wal"
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "-c", str(config), "--log-level", "warning"], cwd=ROOT
    )
    # (salts, index of the frame) -> page number; commit frames mark the ends of transactions
    seen: dict[tuple[tuple[int, int], int], Frame] = {}
    page_size = 4096
    try:
        time.sleep(a.warm_up)
        b0, t0 = write_bytes(agent.pid), time.monotonic()
        while time.monotonic() - t0 < a.seconds:
            try:
                data = wal.read_bytes()
            except FileNotFoundError:
                data = b""
            salts, size, frames = wal_frames(data)
            page_size = size or page_size
            for i, f in enumerate(frames):
                seen.setdefault((salts, i), f)
            time.sleep(a.every)
        b1, t1 = write_bytes(agent.pid), time.monotonic()
        shutil.copy(db, base / "copy.db")
        if wal.exists():
            shutil.copy(wal, base / "copy.db-wal")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
        sim.terminate()
        broker.terminate()
        sim.wait(timeout=30)
        broker.wait(timeout=30)
    owner = page_names(base / "copy.db")
    seconds = t1 - t0
    # Transactions: frames of one generation in order, each ending at a commit frame.
    by_kind: dict[str, list[Counter[str]]] = defaultdict(list)
    distinct_per_generation: dict[tuple[int, int], set[int]] = defaultdict(set)
    current: Counter[str] = Counter()
    last_gen: tuple[int, int] | None = None
    for (gen, _i), (pno, commit) in sorted(seen.items(), key=lambda kv: (kv[0][0] != last_gen, kv[0])):
        if gen != last_gen:
            current = Counter()
            last_gen = gen
        current[owner.get(pno, "(freed or new)")] += 1
        distinct_per_generation[gen].add(pno)
        if commit:
            by_kind[kind_of(set(current))].append(current)
            current = Counter()
    frames_total = sum(sum(c.values()) for cs in by_kind.values() for c in cs)
    kinds: dict[str, Any] = {}
    for kind, txns in sorted(by_kind.items(), key=lambda kv: -sum(sum(c.values()) for c in kv[1])):
        total: Counter[str] = Counter()
        for c in txns:
            total.update(c)
        kinds[kind] = {
            "commits_per_s": round(len(txns) / seconds, 2),
            "pages_per_commit": round(sum(total.values()) / len(txns), 2),
            "by_table": {n: round(v / len(txns), 2) for n, v in total.most_common()},
        }
    result = {
        "bench": "flash_pages",
        "interval": a.interval or "default",
        "seconds": round(seconds, 1),
        "page_size": page_size,
        "written_bytes_per_s": round((b1 - b0) / seconds),
        "wal_bytes_per_s": round(frames_total * (page_size + 24) / seconds),
        "checkpoint_pages_per_s": round(sum(len(s) for s in distinct_per_generation.values()) / seconds, 1),
        "commits_per_s": round(sum(len(t) for t in by_kind.values()) / seconds, 2),
        "kinds": kinds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""End-to-end import benchmark: `edge-agent import` of a JSON Lines file, as a real process.

Prints ONE JSON line: lines/s of the whole command (start-up, parse, hash,
decide, commit with synchronous=FULL) for 100,000 lines with 20 % repeats,
the peak RSS of the importer for 100,000 and for 300,000 lines (flat memory
means the file is streamed), and a same-run baseline: a bare Python loop that
reads the same file, json.loads each line and executemany-inserts the raw
lines into one SQLite table with the same pragmas, with the ratio.

    python bench/import_file.py [--lines 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_file(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            k = i if i % 5 else max(0, i - 7)  # every fifth line repeats an earlier key
            f.write(
                json.dumps(
                    {
                        "source": f"PUMP-{k % 300:03d}/Trip",
                        "transitionId": f"T{k}",
                        "bootId": "B17",
                        "sourceTimestamp": f"2026-04-22T08:{(k // 6000) % 60:02d}:{(k // 100) % 60:02d}.{k % 1000:03d}Z",
                        "arrivalAt": "2026-04-22T09:00:00.000Z",
                        "payload": {"state": "Trip" if k % 2 else "Normal", "severity": "High"},
                    }
                )
                + "\n"
            )


def run_import(db: Path, file: Path) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of one `edge-agent import` process."""
    cmd = [sys.executable, "-m", "agent", "--db", str(db), "import", str(file), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"import failed: {proc.stderr.read().decode() if proc.stderr else status}")
    return elapsed, int(usage.ru_maxrss)


def baseline(db: Path, file: Path) -> float:
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE raw(line INTEGER PRIMARY KEY, source TEXT, tid TEXT, boot TEXT, raw TEXT)")
    t0 = time.perf_counter()
    batch: list[tuple[int, str, str, str, str]] = []
    with file.open() as f:
        for n, text in enumerate(f, 1):
            obj = json.loads(text)
            batch.append((n, obj["source"], obj["transitionId"], obj["bootId"], text))
            if len(batch) == 1000:
                con.execute("BEGIN")
                con.executemany("INSERT INTO raw VALUES (?,?,?,?,?)", batch)
                con.execute("COMMIT")
                batch = []
    if batch:
        con.execute("BEGIN")
        con.executemany("INSERT INTO raw VALUES (?,?,?,?,?)", batch)
        con.execute("COMMIT")
    con.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=100_000)
    args = ap.parse_args()
    n = args.lines
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small.jsonl", Path(tmp) / "large.jsonl"
        write_file(small, n)
        write_file(large, 3 * n)
        seconds, rss_small = run_import(Path(tmp) / "a.db", small)
        _, rss_large = run_import(Path(tmp) / "b.db", large)
        base = baseline(Path(tmp) / "c.db", small)
    print(
        json.dumps(
            {
                "bench": "import_file",
                "lines": n,
                "import_lines_per_s": round(n / seconds),
                "baseline_parse_insert_lines_per_s": round(n / base),
                "ratio_vs_baseline": round(base / seconds, 3),
                "peak_rss_kib_lines": rss_small,
                "peak_rss_kib_3x_lines": rss_large,
                "rss_growth_3x": round(rss_large / rss_small, 3),
            }
        )
    )


if __name__ == "__main__":
    main()

"""End-to-end import benchmark: `edge-agent import --json` of a JSON Lines file, as a real process.

Prints ONE JSON line. The file has N lines (default 100,000), half of them re-deliveries of
an earlier line's event. Each round runs, alternated (`--rounds`, default 3; medians):

* agent: `python -m agent --db <new store> import <file> --json` (start-up, parse,
  normalise, hash, decide, commit with synchronous=FULL, one result line per input line
  printed after its commit);
* baseline: a minimal correct importer, also its own process (`--minimal`): reads the file,
  `json.loads` each line, checks the key fields, canonical JSON of the payload (`json.dumps`
  with sorted keys: exactly RFC 8785 for these flat payloads) and its SHA-256, then per batch
  of 1,000 lines in one transaction (WAL, synchronous=FULL): one look-up of the batch's keys,
  the decision (inserted / duplicate / conflict), `executemany` of the new events and of
  every arrival with its raw line, COMMIT, and one JSON result per line printed.

Figures: lines/s of both (process wall time), the ratio, and peak RSS (ru_maxrss of the
process) of the agent for N and for 3N lines (flat memory means the file is streamed).

    python bench/import_file.py [--lines 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rounds import alternate, median, ratio


def write_file(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            k = i if i % 2 == 0 else max(0, i - 101)  # every second line re-delivers an earlier event
            f.write(
                json.dumps(
                    {
                        "source": f"PUMP-{k % 300:03d}/Trip",
                        "transitionId": f"T{k}",
                        "bootId": "B17",
                        "sourceTimestamp": f"2026-04-22T08:{(k // 6000) % 60:02d}:{(k // 100) % 60:02d}.{k % 1000:03d}Z",
                        "arrivalAt": "2026-04-22T09:00:00.000Z",
                        "payload": {
                            "state": "Trip" if k % 2 else "Normal",
                            "severity": "High",
                            "value": k % 97,
                        },
                    }
                )
                + "\n"
            )


def timed_process(cmd: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of one process; stdout discarded."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.read().decode() if proc.stderr else status}")
    return elapsed, int(usage.ru_maxrss)


def agent_cmd(db: Path, file: Path) -> list[str]:
    return [sys.executable, "-m", "agent", "--db", str(db), "import", str(file), "--json"]


def minimal_cmd(db: Path, file: Path) -> list[str]:
    return [sys.executable, __file__, "--minimal", str(db), str(file)]


def minimal_importer(db: str, file: str) -> None:
    """The baseline: a minimal importer that still does what a correct one must (see the docstring)."""
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE events(id INTEGER PRIMARY KEY, source TEXT NOT NULL, transition_id TEXT NOT NULL,"
        " boot_id TEXT NOT NULL, source_ts TEXT, payload TEXT NOT NULL, payload_hash TEXT NOT NULL,"
        " UNIQUE(source, transition_id, boot_id))"
    )
    con.execute(
        "CREATE TABLE arrivals(id INTEGER PRIMARY KEY, line INTEGER, source TEXT, transition_id TEXT,"
        " boot_id TEXT, payload_hash TEXT, decision TEXT NOT NULL, canonical_id INTEGER, raw TEXT NOT NULL)"
    )
    next_id = 1
    out = sys.stdout
    with open(file, encoding="utf-8") as f:
        batch: list[tuple[int, str]] = []
        for n, text in enumerate(f, 1):
            batch.append((n, text))
            if len(batch) == 1000:
                next_id = _minimal_batch(con, batch, next_id, out)
                batch = []
        if batch:
            _minimal_batch(con, batch, next_id, out)
    con.close()


def _minimal_batch(con: sqlite3.Connection, batch: list[tuple[int, str]], next_id: int, out: object) -> int:
    parsed = []
    for n, text in batch:
        obj = json.loads(text)
        key = (obj["source"], obj["transitionId"], obj["bootId"])
        if not all(isinstance(x, str) and x for x in key):
            raise SystemExit(f"line {n}: identity incomplete")
        ts = obj.get("sourceTimestamp")
        payload = json.dumps(obj["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text_hash = f'{{"payload":{payload},"sourceTimestamp":{json.dumps(ts)}}}'
        parsed.append((n, key, ts, payload, hashlib.sha256(text_hash.encode()).hexdigest(), text))
    con.execute("BEGIN IMMEDIATE")
    keys = list({p[1] for p in parsed})
    known: dict[tuple[str, str, str], tuple[int, str]] = {}
    # One statement for the batch's keys, each looked up through the unique index.
    for cid, src, tid, boot, h in con.execute(
        "SELECT e.id, e.source, e.transition_id, e.boot_id, e.payload_hash FROM json_each(?) AS j"
        " CROSS JOIN events AS e ON e.source = j.value ->> 0 AND e.transition_id = j.value ->> 1"
        " AND e.boot_id = j.value ->> 2",
        (json.dumps(keys),),
    ):
        known[(src, tid, boot)] = (cid, h)
    new_events = []
    arrivals = []
    results = []
    for n, key, ts, payload, h, text in parsed:
        seen = known.get(key)
        if seen is None:
            cid = next_id
            next_id += 1
            known[key] = (cid, h)
            new_events.append((cid, *key, ts, payload, h))
            decision = "inserted"
        else:
            cid = seen[0]
            decision = "duplicate" if seen[1] == h else "conflict"
        arrivals.append((n, *key, h, decision, cid, text))
        results.append(json.dumps({"line": n, "decision": decision, "canonical_id": cid}) + "\n")
    con.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?)", new_events)
    con.executemany(
        "INSERT INTO arrivals(line, source, transition_id, boot_id, payload_hash, decision, canonical_id, raw)"
        " VALUES (?,?,?,?,?,?,?,?)",
        arrivals,
    )
    con.execute("COMMIT")
    sys.stdout.write("".join(results))
    sys.stdout.flush()
    return next_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and baseline")
    ap.add_argument("--minimal", nargs=2, metavar=("DB", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.minimal:
        minimal_importer(*args.minimal)
        return
    n = args.lines
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small.jsonl", Path(tmp) / "large.jsonl"
        write_file(small, n)
        write_file(large, 3 * n)
        runs = iter(range(10_000))
        rss: list[int] = []

        def agent() -> float:
            seconds, peak = timed_process(agent_cmd(Path(tmp) / f"a{next(runs)}.db", small))
            rss.append(peak)
            return n / seconds

        def baseline() -> float:
            return n / timed_process(minimal_cmd(Path(tmp) / f"b{next(runs)}.db", small))[0]

        agent_rates, base_rates = alternate(args.rounds, agent, baseline)
        _, rss_large = timed_process(agent_cmd(Path(tmp) / "large.db", large))
    rss_small = max(rss)
    print(
        json.dumps(
            {
                "bench": "import_file",
                "lines": n,
                "rounds": args.rounds,
                "import_lines_per_s": round(median(agent_rates)),
                "baseline_minimal_importer_lines_per_s": round(median(base_rates)),
                "ratio_vs_baseline": ratio(agent_rates, base_rates),
                "agent_rounds": [round(x) for x in agent_rates],
                "baseline_rounds": [round(x) for x in base_rates],
                "peak_rss_kib_lines": rss_small,
                "peak_rss_kib_3x_lines": rss_large,
                "rss_growth_3x": round(rss_large / rss_small, 3),
            }
        )
    )


if __name__ == "__main__":
    main()

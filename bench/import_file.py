"""End-to-end import benchmark: `edge-agent import --json` of a JSON Lines file, as a real process.

Prints ONE JSON line. The bench writes its files itself (bench/import_shapes.py), each of N lines
(default 100,000), half of them re-deliveries of an earlier line's event, in three shapes:
`today` (re-deliveries of recent keys, the file of the earlier rounds: its figures are the
top-level ones), `spread` (re-deliveries drawn from the whole history) and `outsider` (spread, as
a second gateway writes them, with floats, non-ASCII text and several boots per source): each
shape's figures under `shapes`, and the worst ratios named. Per shape, each round runs,
alternated (`--rounds`, default 3; medians):

* agent: `python -m agent --db <new store> import <file> --json` (start-up, parse,
  normalise, hash, decide, commit with synchronous=FULL, one result line per input line
  printed after its commit);
* baseline: a minimal correct importer, also its own process (`--minimal`), plain stdlib: it
  does per line what the contract (docs/contract.md) asks of any importer,
  and nothing of the agent's own (bench/import_baseline.py) (no config, no pipeline, no review tables). Per batch of
  1,000 lines, one transaction (WAL, synchronous=FULL): one look-up of the batch's keys
  through the unique index, the decisions, `executemany` of the new events, of every arrival
  and of the new boots, COMMIT, then one result per line printed. Per line it
  - reads bytes and decodes UTF-8 (a line that is not is `rejected`, its raw bytes kept), skips
    blank lines (contract 5);
  - `json.loads`, refusing NaN/Infinity; not JSON, not an object, or `payload` not an object is
    `rejected` with its reason (2); a missing payload is `{}` (1);
  - takes each id as text, an integer as its decimal text, anything else `rejected`;
    missing/null/empty is `identity_incomplete` with its reason, no boot made for it (1, 2);
  - checks and normalises `sourceTimestamp` and `arrivalAt` (RFC 3339 with offset -> UTC,
    milliseconds; a malformed one is `rejected` with its reason; an absent `arrivalAt` is now)
    (1, 2, 5); a text already in normal form is checked by one regular expression and a cached
    look-up of its day;
  - canonical JSON of the payload: `json.dumps` with sorted keys, which is RFC 8785 for text,
    integers, true/false/null and ASCII keys; a line with a float, non-ASCII text or a `\\u` escape takes a
    small full RFC 8785 encoder (ECMAScript numbers, UTF-16 key order) (2); SHA-256 of
    `{"payload": ..., "sourceTimestamp": ...}` (2);
  - a lone UTF-16 surrogate in the ids or payload is `rejected` (it is not Unicode text);
  - writes the arrival with the evidence the contract lists for every arrival: its own id,
    line, key, normalised `sourceTimestamp`, `arrivalAt`, the receiver, `payload_hash`,
    decision, canonical id, reason, raw line (2, 6); the raw line keeps unknown fields (5);
  - decides under the write lock (BEGIN IMMEDIATE) with the events' composite UNIQUE index
    behind it: a key that slipped past the look-up fails the insert, it never merges (1, 2);
  - a bootId the store has not seen for the device is a BootObserved row: device, bootId,
    `previous_bootId` (the device's last boot recorded; every import line is live), first
    arrival and source time, the arrival id, evidence (3); the boots already stored are read at
    start (3, "After the agent itself restarts"); a store id (random UUID) is made with a new
    store (4);
  - prints the contract's whole result line: `line`, `decision`, `canonical_id`,
    `duplicate_of`, `reason`, `flags` (6).
  What it does not store: `duplicate_count`, `conflict_count`, `first_arrival`,
  `last_arrival` and the `DuplicateConflict` status (2) are all derived from the arrivals
  (count, min, max of `arrivalAt`, any `conflict` per canonical id), so the least work is not
  to keep them; no outbox rows (an import with no config has no upstream, 4); no
  `key_horizon_passed` flag (no retention without a config, 8).
  After the timed rounds (untimed), the agent and this baseline import the bench file and a
  set of edge lines (`EDGE_LINES`): every result line (`line`, `decision`, `canonical_id`,
  `duplicate_of`, `flags`) must be equal, and on the edge lines every arrival's
  `payload_hash` and `sourceTimestamp` too (from the agent's `report --json`); the bench
  exits non-zero naming the first difference otherwise. The decision counts are printed.
* the old, lean baseline (`--minimal-lean`, printed as `baseline_lean_lines_per_s` and
  `ratio_vs_lean_baseline`, run next to the new one in alternating order): `json.loads`,
  key fields must be non-empty text (else it stops), `json.dumps` of the payload and its
  SHA-256 with the timestamp as given, the same batch look-up, `executemany` of events and
  arrivals (line, key, hash, decision, canonical id, raw line), one transaction per 1,000 lines,
  `line`/`decision`/`canonical_id` printed. It checks no timestamp, stores no `arrivalAt`,
  receiver, reason or boot, and refuses no malformed line: not a correct importer, kept so the
  change of baseline hides nothing.

Figures: lines/s of all three (process wall time), the ratios, CPU per line of the agent and
the minimal importer (user + system, medians; the agent's includes its parsing process, which
runs on a second core beside it for a file this size: its rate is wall-clock on two cores
against the baseline's one), and peak RSS (ru_maxrss) of the agent for N and for 3N lines (flat
memory means the file is streamed): the larger of the agent's process and its parsing process
(about 34 MB), not their sum.

    python bench/import_file.py [--lines 100000] [--rounds 3] [--shapes today,spread,outsider]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.import_baseline import lean_importer, minimal_importer
from bench.import_shapes import SHAPES, write_file, write_shape
from bench.rounds import alternate, median, ratio

BASELINE = str(Path(__file__).resolve().parent / "import_baseline.py")


def timed_process(cmd: list[str]) -> tuple[float, int, float]:
    """(seconds, peak RSS in KiB, CPU seconds) of one process, stdout discarded. The CPU is user +
    system, with that of the children it waited for (the agent's parsing process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.read().decode() if proc.stderr else status}")
    return elapsed, int(usage.ru_maxrss), usage.ru_utime + usage.ru_stime


def agent_cmd(db: Path, file: Path) -> list[str]:
    return [sys.executable, "-m", "agent", "--db", str(db), "import", str(file), "--json"]


def minimal_cmd(db: Path, file: Path, lean: bool = False) -> list[str]:
    return [sys.executable, BASELINE, "--minimal-lean" if lean else "--minimal", str(db), str(file)]


# Lines a correct importer must decide right (contract sections 1, 2, 3, 5): the bench's own file
# has only the common shape, so the decision check runs on this too.
EDGE_LINES = [
    '{"source": "P-07/Trip", "transitionId": 91, "bootId": "B17", "sourceTimestamp": "2026-04-22T10:00:12.120456+02:00", "payload": {"severity": "High", "v": 1.0}}',
    '{"source": "P-07/Trip", "transitionId": "91", "bootId": "B17", "sourceTimestamp": "2026-04-22t08:00:12.12z", "arrivalAt": "2026-04-22T08:00:13Z", "payload": {"v": 1, "severity": "High"}}',
    '{"source": "P-07/Trip", "transitionId": "91", "bootId": "B17", "sourceTimestamp": "2026-04-22T08:00:12.121Z", "payload": {"v": 1, "severity": "High"}}',
    "",
    "not json",
    "[1, 2]",
    '{"source": "P-07/Trip", "transitionId": "92", "bootId": "B17", "payload": [1]}',
    '{"source": "P-07/Trip", "transitionId": 9.5, "bootId": "B17"}',
    '{"source": "P-07/Trip", "transitionId": true, "bootId": null}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": "B17", "sourceTimestamp": "2026-04-22 08:00:12Z"}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": "B17", "arrivalAt": "2026-04-22T08:00:12"}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": "B17", "sourceTimestamp": "2026-02-30T08:00:12Z"}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": null}',
    '{"source": "", "transitionId": "93", "bootId": "B1"}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": "B18", "payload": {"x": 1e21, "y": 0.1, "z": -0.0, "w": "\\u00e9\\u0001", "\\ue000": 1, "\\ud83d\\ude00": 2}}',
    '{"source": "P-07/Trip", "transitionId": "93", "bootId": "B18", "payload": {"\\ud83d\\ude00": 2, "\\ue000": 1, "w": "\\u00e9\\u0001", "z": 0, "y": 0.1, "x": 1e21}}',
    '{"source": "P-07/Trip", "transitionId": "97", "bootId": "B18", "payload": {"\\ue000": 1, "\\ud83d\\ude00": 2}}',
    '{"source": "P-07/Trip", "transitionId": "98", "bootId": "B18", "payload": {"\ue000": 1, "\U0001f600": "\u00e9"}}',
    '{"source": "P-07/Trip", "transitionId": "\\ud800", "bootId": "B18"}',
    '{"source": "P-07/Trip", "transitionId": "94", "bootId": "B18", "sourceTimestamp": "2026-04-22T23:59:60.5-01:30"}',
    '{"source": "P-07/Trip", "transitionId": "95", "bootId": "B18", "payload": {"a": NaN}}',
    '{"source": "P-07/Trip", "transitionId": "96", "bootId": "B17", "unknown": 1}',
    '{"source": "P-08", "transitionId": "1", "bootId": "B1", "sourceTimestamp": "2026-04-22T08:00:12+24:00"}',
    '{"source": "P-08", "transitionId": "2", "bootId": "B1", "sourceTimestamp": "2026-04-22T08:00:1\\u0662.120Z"}',
]


def decisions(cmd: list[str]) -> list[tuple[Any, ...]]:
    """(line, decision, canonical_id, duplicate_of, flags) of every result line an importer prints."""
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [
        (r["line"], r["decision"], r["canonical_id"], r["duplicate_of"], r.get("flags", []))
        for r in map(json.loads, out.splitlines())
    ]


def check_same_decisions(tmp: Path, file: Path, name: str, hashes: bool = False) -> dict[str, int]:
    """Run the agent and the baseline on `file`; fail loudly unless every result line agrees.

    With `hashes`, every arrival's payload_hash and sourceTimestamp must agree too (from the
    agent's `report --json`). Returns the count of each decision.
    """
    agent = decisions(agent_cmd(tmp / f"check-a-{name}.db", file))
    base = decisions(minimal_cmd(tmp / f"check-b-{name}.db", file))
    if agent != base:
        diff = next((a, b) for a, b in itertools.zip_longest(agent, base) if a != b)
        raise SystemExit(f"baseline and agent decide differently on {name} (first difference: {diff})")
    if hashes:  # and the same payload_hash (RFC 8785 and the normal timestamp) on every arrival
        report = subprocess.run(
            [sys.executable, "-m", "agent", "--db", str(tmp / f"check-a-{name}.db"), "report", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        want = {a["line"]: (a["payload_hash"], a["sourceTimestamp"]) for a in json.loads(report)["arrivals"]}
        with sqlite3.connect(tmp / f"check-b-{name}.db") as con:
            got = dict(
                (line, (h, ts))
                for line, h, ts in con.execute("SELECT line, payload_hash, source_ts FROM arrivals")
            )
        if got != want:
            diff = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
            raise SystemExit(f"baseline and agent hash differently on {name}, lines {diff}")
    counts: dict[str, int] = {}
    for r in agent:
        counts[r[1]] = counts.get(r[1], 0) + 1
    return counts


def measure_shape(tmp: Path, shape: str, n: int, rounds: int, lean: bool) -> dict[str, Any]:
    """One shape's figures: alternated rounds of the agent and the minimal importer (and, with
    `lean`, the old lean baseline beside the minimal one), then the untimed decision check."""
    file = tmp / f"{shape}.jsonl"
    write_shape(file, n, shape)
    cpu: dict[str, list[float]] = {"agent": [], "baseline": []}
    rss: list[int] = []
    lean_rates: list[float] = []
    runs = iter(range(10_000))

    def agent() -> float:
        seconds, peak, used = timed_process(agent_cmd(tmp / f"a-{shape}{next(runs)}.db", file))
        cpu["agent"].append(used)
        rss.append(peak)
        return n / seconds

    def baseline() -> float:
        r = next(runs)
        lean_first = r % 2 == 1
        if lean and lean_first:
            lean_rates.append(n / timed_process(minimal_cmd(tmp / f"l-{shape}{r}.db", file, lean=True))[0])
        seconds, _, used = timed_process(minimal_cmd(tmp / f"b-{shape}{r}.db", file))
        cpu["baseline"].append(used)
        if lean and not lean_first:
            lean_rates.append(n / timed_process(minimal_cmd(tmp / f"l-{shape}{r}.db", file, lean=True))[0])
        return n / seconds

    agent_rates, base_rates = alternate(rounds, agent, baseline)
    agent_cpu, base_cpu = median(cpu["agent"]) / n * 1e6, median(cpu["baseline"]) / n * 1e6
    got: dict[str, Any] = {
        "import_lines_per_s": round(median(agent_rates)),
        "baseline_minimal_importer_lines_per_s": round(median(base_rates)),
        "ratio_vs_baseline": ratio(agent_rates, base_rates),
        # CPU per line of all the process's work (the agent's on two cores: its parsing process
        # is counted), medians
        "agent_cpu_us_per_line": round(agent_cpu, 1),
        "baseline_cpu_us_per_line": round(base_cpu, 1),
        "cpu_per_line_ratio": round(agent_cpu / base_cpu, 3),
        "agent_rounds": [round(x) for x in agent_rates],
        "baseline_rounds": [round(x) for x in base_rates],
        "peak_rss_kib_lines": max(rss),
    }
    if lean:
        got["baseline_lean_lines_per_s"] = round(median(lean_rates))
        got["ratio_vs_lean_baseline"] = ratio(agent_rates, lean_rates)
        got["baseline_lean_rounds"] = [round(x) for x in lean_rates]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and baseline")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--minimal", nargs=2, metavar=("DB", "FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--minimal-lean", nargs=2, metavar=("DB", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.minimal:
        minimal_importer(*args.minimal)
        return
    if args.minimal_lean:
        lean_importer(*args.minimal_lean)
        return
    n = args.lines
    shapes = args.shapes.split(",")
    if "today" not in shapes:
        raise SystemExit("--shapes must hold today (its figures are the top-level ones)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        figures = {s: measure_shape(tmp, s, n, args.rounds, lean=s == "today") for s in shapes}
        large, edge = tmp / "large.jsonl", tmp / "edge.jsonl"
        write_file(large, 3 * n)
        _, rss_large, _ = timed_process(agent_cmd(tmp / "large.db", large))
        # Untimed, after every measured process (a child's ru_maxrss counts the RSS of this
        # process at the fork, and the check holds every result line): the baseline must decide
        # every line as the agent does, or its rate means nothing; on the edge lines every
        # payload_hash and timestamp must agree too.
        for s in shapes:
            figures[s]["decisions_checked"] = check_same_decisions(tmp, tmp / f"{s}.jsonl", f"{s} file")
        edge.write_text("\n".join(EDGE_LINES) + "\n")
        check_same_decisions(tmp, edge, "edge lines", hashes=True)
    today = figures["today"]
    worst = min(shapes, key=lambda s: figures[s]["ratio_vs_baseline"])
    print(
        json.dumps(
            {
                "bench": "import_file",
                "lines": n,
                "rounds": args.rounds,
                **today,
                "peak_rss_kib_3x_lines": rss_large,
                "rss_growth_3x": round(rss_large / today["peak_rss_kib_lines"], 3),
                "worst_shape": worst,
                "worst_ratio_vs_baseline": figures[worst]["ratio_vs_baseline"],
                "worst_cpu_per_line_ratio": max(f["cpu_per_line_ratio"] for f in figures.values()),
                "shapes": {s: f for s, f in figures.items() if s != "today"},
            }
        )
    )


if __name__ == "__main__":
    main()

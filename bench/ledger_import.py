"""`edge-agent ledger import` against a lean set-based arbiter: whole processes, parsing timed.

Prints ONE JSON line. Against a throwaway PostgreSQL cluster of its own (initdb + pg_ctl; fsync
and synchronous_commit on), for files of N lines (default 100,000) at 0 % and 50 %
re-deliveries, alternated over rounds (medians), each process on a fresh database made from one
migrated template:

* `ledger`: `python -m agent ledger --dsn DSN import FILE --json` (start-up, parsing, the
  arbiter, one transaction per batch, results printed after each commit);
* `lean`: `python bench/ledger_lean.py DSN FILE`, a lean set-based arbiter written apart from the
  ledger's code (what it does: its docstring), one transaction per 1,000 lines.

The files are the shapes an outsider tries (bench/import_shapes.py's `outsider`): payloads with
floats and non-ASCII text, several boots per source; at 50 % every second line re-delivers an
event drawn from the whole history so far, written as a second gateway would (the payload's keys
in another order, `4.0` for `4`, the timestamp with another offset): a `duplicate`.

Figures per share: deliveries/s of each (process wall time), their ratio, the client CPU of each
process (user + system) and the server's CPU during it (the cluster's processes, those that
ended included) per delivery. After the timed rounds (untimed) both import each file once more
and every line's decision, and which line's event each result names, must agree.

    python bench/ledger_import.py [-n 100000] [--rounds 3] [--also DIR]

`--also DIR` adds a third side, `also`: the ledger of another checkout (`git archive` of a
commit unpacked in DIR), its import run in the same alternated rounds (A/B of two versions).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster

import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from bench.import_shapes import _outsider_event  # noqa: E402

LEAN = str(ROOT / "bench" / "ledger_lean.py")
TICKS = os.sysconf("SC_CLK_TCK")


def write_file(path: Path, n: int, dup_share: float) -> None:
    """n lines; with dup_share 0.5 every second line re-delivers an earlier event, written otherwise."""
    rng = random.Random(27)
    fresh = 0
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            again = dup_share > 0 and i % 2 == 1
            if again:
                k = rng.randrange(fresh)
            else:
                k, fresh = fresh, fresh + 1
            f.write(json.dumps(_outsider_event(k, again), ensure_ascii=k % 2 == 0) + "\n")


def server_cpu_s(postmaster: int) -> float:
    """CPU seconds of the cluster: the postmaster's ended children and its live ones."""

    def times(pid: int, fields: slice) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                parts = f.read().rpartition(")")[2].split()
        except OSError:
            return 0.0
        return sum(int(x) for x in parts[fields]) / TICKS

    total = times(postmaster, slice(11, 15))  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == postmaster:
                total += times(int(entry), slice(11, 13))
    return total


def run(cmd: list[str], out: Any = subprocess.DEVNULL, cwd: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process and its children (the import's parsing process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{cmd[:6]} failed: {proc.stderr.read().decode() if proc.stderr else status}")
    return elapsed, usage.ru_utime + usage.ru_stime


def command(name: str, dsn: str, file: Path) -> list[str]:
    if name in ("ledger", "also"):
        return [sys.executable, "-m", "agent", "ledger", "--dsn", dsn, "import", str(file), "--json"]
    return [sys.executable, LEAN, dsn, str(file)]


def make_template(cluster: pgcluster.Cluster) -> str:
    """The database `bench_template` with the ledger's schema (`ledger migrate`), which each
    round's database copies (`fresh_db`); its DSN."""
    with psycopg.connect(cluster.dsn(), autocommit=True) as c:
        c.execute("CREATE DATABASE bench_template")
    template = cluster.dsn("bench_template")
    subprocess.run(
        [sys.executable, "-m", "agent", "ledger", "--dsn", template, "migrate"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return template


def fresh_db(cluster: pgcluster.Cluster) -> str:
    name = "b_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE bench_template")
    return cluster.dsn(name)


def drop_db(cluster: pgcluster.Cluster, dsn: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name}")


def results(cluster: pgcluster.Cluster, name: str, file: Path) -> list[tuple[Any, ...]]:
    """(line, decision, the line that inserted the event it names) of every result line."""
    dsn = fresh_db(cluster)
    try:
        out = subprocess.run(command(name, dsn, file), cwd=ROOT, capture_output=True, text=True, check=True)
    finally:
        drop_db(cluster, dsn)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    inserted_by = {r["canonical_id"]: r["line"] for r in rows if r["decision"] == "inserted"}
    return [(r["line"], r["decision"], inserted_by.get(r["canonical_id"])) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=100_000, help="lines per file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--also", type=Path, help="another checkout's ledger, a third side (A/B)")
    args = ap.parse_args()
    n = args.n
    bindir = pgcluster.find_binaries()
    if bindir is None:
        print("bench/ledger_import.py: no PostgreSQL server binaries (initdb, pg_ctl)", file=sys.stderr)
        sys.exit(2)
    cluster = pgcluster.create(bindir, durable=True)
    try:
        make_template(cluster)
        postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        with tempfile.TemporaryDirectory() as tmp:
            files = {dup: Path(tmp) / f"dup{dup}.jsonl" for dup in (0, 50)}
            for dup, file in files.items():
                write_file(file, n, dup / 100)
            got: dict[str, list[tuple[float, float, float]]] = {}
            names = ["ledger", "lean"] + (["also"] if args.also else [])
            for rnd in range(args.rounds):
                order = names if rnd % 2 == 0 else names[::-1]
                for dup, file in files.items():
                    for name in order:
                        dsn = fresh_db(cluster)
                        before = server_cpu_s(postmaster)
                        cwd = args.also if name == "also" else ROOT
                        wall, cpu = run(command(name, dsn, file), cwd=cwd)
                        server = server_cpu_s(postmaster) - before
                        got.setdefault(f"{name}_dup{dup}", []).append((n / wall, cpu, server))
                        drop_db(cluster, dsn)
            checked = {}
            for dup, file in files.items():
                a, b = results(cluster, "ledger", file), results(cluster, "lean", file)
                if a != b:
                    diff = next((x, y) for x, y in zip(a, b, strict=False) if x != y)
                    raise SystemExit(f"ledger and lean arbiter decide differently at {dup} %: {diff}")
                counts: dict[str, int] = {}
                for r in a:
                    counts[r[1]] = counts.get(r[1], 0) + 1
                checked[f"dup{dup}"] = counts
    finally:
        cluster.destroy()
    out: dict[str, Any] = {"bench": "ledger_import", "deliveries": n, "batch": 1000, "rounds": args.rounds}
    for dup in (0, 50):
        for name in names:
            runs = got[f"{name}_dup{dup}"]
            out[f"{name}_dup{dup}_per_s"] = round(statistics.median(r[0] for r in runs))
            out[f"{name}_dup{dup}_client_cpu_us"] = round(statistics.median(r[1] for r in runs) / n * 1e6, 1)
            out[f"{name}_dup{dup}_server_cpu_us"] = round(statistics.median(r[2] for r in runs) / n * 1e6, 1)
            out[f"{name}_dup{dup}_rounds"] = [round(r[0]) for r in runs]
        for name in names:
            if name != "lean":
                out[f"{name}_vs_lean_dup{dup}"] = round(
                    out[f"{name}_dup{dup}_per_s"] / out[f"lean_dup{dup}_per_s"], 3
                )
    out["decisions_checked"] = checked
    out["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

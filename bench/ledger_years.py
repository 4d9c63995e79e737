"""The ledger after years: intake on a full ledger while retention and archiving run.

Prints ONE JSON line (progress on stderr). Against a throwaway PostgreSQL cluster of its own
(initdb + pg_ctl; fsync and synchronous_commit on; shared_buffers 256MB, max_wal_size 4GB):

1. **Fill** (`--arrivals`, default 20,000,000): the ledger's schema (`ledger migrate`), the monthly
   time partitions a ledger running since the first day would have made (the default period),
   then arrivals/2 canonical events spread evenly over `--days` (default 730) up to now, each with two
   arrivals (gateway `gw-a` inserted, `gw-b` its duplicate a second later), written by the
   server itself (`INSERT ... SELECT` over `generate_series`, chunks of 500,000 canonicals, not
   a client COPY: the rows never cross the socket). Raw lines about 330 bytes, as a CloudEvent
   from MQTT; payload hashes computed as the arbiter computes them (checked on a sample).
2. **Intake, alternated** (`--rounds` per phase, default 3): `edge-agent ledger import --json` of
   a file of `--lines` (default 50,000) fresh deliveries with half re-deliveries
   (bench/import_shapes.py's `outsider` events, new keys each round), into a fresh empty ledger
   and into the full one, in turn, in three phases: before the prune; beside
   `edge-agent ledger prune` (retention: arrivals 90d, notifications 30d, canonical payloads
   365d, identity horizon 5y), started before the phase's first round and running on; after the
   prune (and a VACUUM). Target (issue 33): beside the prune, the full ledger's intake at least
   0.8 of the empty one's (medians).
3. **Size**: `pg_database_size` sampled every 5 s over the whole run; per table (partitions
   summed) before and after the prune (arrival partitions wholly past 90 days archived and
   dropped; canonical payloads cleared row by row, their pages kept for reuse) and after a plain
   VACUUM; then more rounds on the pruned ledger.
4. **Decisions verified**: each round's decisions (every fresh line inserted, every re-delivery a
   duplicate of its line's event), and after the prune, re-deliveries of 1,000 events whose
   arrivals and payloads were pruned (a second gateway's copy: `duplicate` against the compact
   identity) and 1,000 with another payload (`conflict`).

    python bench/ledger_years.py                          # 20M arrivals: about an hour here
    python bench/ledger_years.py --arrivals 200000 --lines 5000 --rounds 1   # the CI smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))  # the tests' throwaway cluster

import pgcluster  # noqa: E402
import psycopg  # noqa: E402

from agent.core.contract import payload_hash  # noqa: E402
from agent.core.timestamps import format_timestamp  # noqa: E402
from bench.import_shapes import _outsider_event  # noqa: E402
from bench.ledger_import import drop_db, fresh_db, make_template  # noqa: E402

LEDGER = [sys.executable, "-m", "agent", "ledger"]
CHUNK = 500_000
SOURCES = 500
TS_SQL = "to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
PAYLOAD_SQL = """'{"level":' || (i %% 1000) || ',"state":"' || (CASE WHEN i %% 2 = 0 THEN 'open' ELSE 'closed' END) || '"}'"""

# One chunk of canonicals [lo, hi) and their two arrivals each; %(start)s is the first event's
# time, %(step)s the seconds between events.
FILL_SQL = f"""
WITH g AS (
  SELECT i, %(start)s::timestamptz + make_interval(secs => i * %(step)s::float8) AS t
  FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS i
), c AS (
  INSERT INTO canonical_event (id, source, transition_id, boot_id, source_ts, payload, payload_hash,
                               inserted_arrival_at, first_gateway, created_at)
  OVERRIDING SYSTEM VALUE
  SELECT i + 1, 'plant-a/PLC-' || (i %% {SOURCES}) || '/valve', 'T' || i, 'B' || (i / 1000000), t,
         {PAYLOAD_SQL},
         encode(sha256(convert_to('{{"payload":' || {PAYLOAD_SQL} || ',"sourceTimestamp":"' || {TS_SQL} || '"}}',
                'UTF8')), 'hex'),
         t, 'gw-a', t
  FROM g
  RETURNING id, source, transition_id, boot_id, source_ts, payload, payload_hash, created_at
)
INSERT INTO arrival (id, kind, decision, canonical_id, source, transition_id, boot_id, source_ts,
                     payload_hash, gateway, gateway_arrival_at, attempt, replayed, received_at, via,
                     ce_id, raw, arrival_key)
OVERRIDING SYSTEM VALUE
SELECT 2 * c.id - 1 + d.n, 'transition', CASE d.n WHEN 0 THEN 'inserted' ELSE 'duplicate' END, c.id,
       c.source, c.transition_id, c.boot_id, c.source_ts, c.payload_hash, d.gw,
       c.created_at + make_interval(secs => d.n), 1, false, c.created_at + make_interval(secs => d.n), 'mqtt',
       d.gw || '-' || c.id,
       convert_to(json_build_object('specversion', '1.0', 'id', d.gw || '-' || c.id, 'type',
         'com.edge-agent.transition', 'source', c.source, 'time', c.source_ts, 'transitionid',
         c.transition_id, 'bootid', c.boot_id, 'gateway', d.gw, 'attempt', 1, 'replayed', false,
         'data', c.payload::json)::text, 'UTF8'),
       sha256(convert_to('fill/' || d.gw || '/' || c.id, 'UTF8'))
FROM c CROSS JOIN (VALUES (0, 'gw-a'), (1, 'gw-b')) AS d(n, gw)
"""


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def monthly_partitions(dsn: str, start: datetime, now: datetime) -> int:
    """The partitions a ledger running since `start` has made (one a month, the default period;
    a new ledger's migration leaves no legacy partition): each month from `start`, and two ahead."""
    from agent.ledger import time_partitions

    async def go() -> int:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            made, at = [], time_partitions.period_start(start, "month")
            while at <= now:
                made += await time_partitions.ensure(conn, "month", 0, now=at)
                at = time_partitions.next_start(at, "month")
            made += await time_partitions.ensure(conn, "month", 2, now=now)
            return len(made)
        finally:
            await conn.close()

    return asyncio.run(go())


def fill(dsn: str, arrivals: int, days: float, now: datetime) -> dict[str, Any]:
    canonicals = arrivals // 2
    start = now - timedelta(days=days)
    step = days * 86400.0 / canonicals
    partitions = monthly_partitions(dsn, start, now)
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(0, canonicals, CHUNK):
            hi = min(canonicals, lo + CHUNK)
            conn.execute(FILL_SQL, {"start": start, "step": step, "lo": lo, "hi": hi})
            done = time.perf_counter() - t0
            log(f"fill: {2 * hi:,} of {arrivals:,} arrivals, {2 * hi / done:,.0f}/s")
        for table in ("canonical_event", "arrival"):
            conn.execute(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))")
        conn.execute("ANALYZE")
        # The arbiter's hash of a sample, as the ledger computes it: the fill must agree.
        for cid, ts, payload, h in conn.execute(
            "SELECT id, source_ts, payload, payload_hash FROM canonical_event WHERE id IN (1, 2, %s)",
            (canonicals,),
        ):
            want = payload_hash(json.loads(payload), format_timestamp(ts))
            if want != h:
                raise SystemExit(f"fill: canonical {cid}'s payload_hash {h} is not the arbiter's {want}")
    return {
        "fill_s": round(time.perf_counter() - t0, 1),
        "canonicals": canonicals,
        "start": start.isoformat(),
        "partitions_made": partitions,
    }


def sizes(dsn: str) -> dict[str, int]:
    """pg_database_size and each table's size, a partitioned table's partitions summed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(p.relname, c.relname), sum(pg_total_relation_size(c.oid))"
            " FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
            " LEFT JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace GROUP BY 1 ORDER BY 2 DESC"
        ).fetchall()
        total = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    out = {"database": int(total[0]) if total else 0}
    out.update({name: int(n) for name, n in rows if n > 8192 * 16})
    return out


class Sampler(threading.Thread):
    """pg_database_size every `every` seconds, with the time since the start."""

    def __init__(self, dsn: str, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.dsn, self.every, self.samples = dsn, every, []  # type: ignore[var-annotated]
        self.stopped = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.is_set():
                row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
                self.samples.append((round(time.monotonic() - self.t0, 1), int(row[0]) if row else 0))
                self.stopped.wait(self.every)


def write_round_file(path: Path, rnd: int, n: int) -> None:
    """n lines: each even line a new event (keys of this round only), each odd one re-delivers the
    line before it as a second gateway writes it (a duplicate)."""
    base = 10_000_000 * (rnd + 1)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            k = base + i // 2
            ev = _outsider_event(k, i % 2 == 1)
            ev["transitionId"] = f"R{rnd}-{k}"  # apart from the fill's T<i> and the other rounds
            f.write(json.dumps(ev) + "\n")


def import_file(dsn: str, file: Path) -> tuple[float, list[dict[str, Any]]]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "agent", "ledger", "--dsn", dsn, "import", str(file), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"ledger import failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall, [json.loads(line) for line in out.stdout.splitlines()]


def check_round(results: list[dict[str, Any]], n: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    by_line = {r["line"]: r for r in results}
    for r in results:
        counts[r["decision"]] = counts.get(r["decision"], 0) + 1
    want = {"inserted": (n + 1) // 2, "duplicate": n // 2}
    if counts != want:
        raise SystemExit(f"decisions {counts}, not {want}")
    for line in range(2, n + 1, 2):  # lines count from 1: every even line re-delivers the one before
        if by_line[line]["canonical_id"] != by_line[line - 1]["canonical_id"]:
            raise SystemExit(f"line {line} names another event than line {line - 1}")
    return counts


def old_redeliveries(path: Path, dsn: str, n: int, cutoff: datetime) -> int:
    """n re-deliveries of pruned events (gateway gw-c, same content) and n with another payload."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT source, transition_id, boot_id, source_ts, payload_hash FROM canonical_event"
            " WHERE payload IS NULL AND created_at < %s ORDER BY id LIMIT %s",
            (cutoff, 2 * n),
        ).fetchall()
    if len(rows) < 2 * n:
        raise SystemExit(f"only {len(rows)} pruned canonicals to re-deliver, {2 * n} wanted")
    with path.open("w", encoding="utf-8") as f:
        for j, (source, tid, boot, ts, _h) in enumerate(rows):
            i = int(tid[1:])
            payload = {"level": i % 1000, "state": "open" if i % 2 == 0 else "closed"}
            if j >= n:
                payload["level"] = -1  # other content under the same key: a conflict
            ev = {
                "source": source,
                "transitionId": tid,
                "bootId": boot,
                "sourceTimestamp": format_timestamp(ts),
                "arrivalAt": format_timestamp(ts),
                "gateway": "gw-c",
                "payload": payload,
            }
            f.write(json.dumps(ev) + "\n")
    return 2 * n


class Rounds:
    """Intake rounds alternated between a fresh empty ledger and the full one; each round's file
    has keys of its own (the round number counts on over the phases)."""

    def __init__(self, cluster: pgcluster.Cluster, full: str, tmp: Path, lines: int) -> None:
        self.cluster, self.full, self.tmp, self.lines = cluster, full, tmp, lines
        self.next = 0

    def phase(self, name: str, rounds: int, beside: subprocess.Popen[str] | None = None) -> dict[str, Any]:
        empty: list[float] = []
        full: list[float] = []
        during: list[bool] = []
        for r in range(rounds):
            rnd, self.next = self.next, self.next + 1
            file = self.tmp / f"round{rnd}.jsonl"
            write_round_file(file, rnd, self.lines)
            for side in ("empty", "full") if r % 2 == 0 else ("full", "empty"):
                if side == "empty":
                    dsn = fresh_db(self.cluster)
                    wall, res = import_file(dsn, file)
                    drop_db(self.cluster, dsn)
                    empty.append(self.lines / wall)
                else:
                    running = beside is not None and beside.poll() is None
                    wall, res = import_file(self.full, file)
                    during.append(running and beside is not None and beside.poll() is None)
                    full.append(self.lines / wall)
                check_round(res, self.lines)
                log(f"{name} round {r} {side}: {self.lines / wall:,.0f} lines/s")
        out: dict[str, Any] = {
            "empty_lines_per_s": round(statistics.median(empty)),
            "full_lines_per_s": round(statistics.median(full)),
            "empty_rounds": [round(x) for x in empty],
            "full_rounds": [round(x) for x in full],
        }
        out["full_vs_empty"] = round(out["full_lines_per_s"] / out["empty_lines_per_s"], 3)
        if beside is not None:
            out["full_rounds_beside_the_prune"] = during
        return out


def start_prune(full: str, cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LEDGER, "--dsn", full, "prune", "-c", str(cfg), "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def prune_summary(prune: subprocess.Popen[str], archive: Path) -> dict[str, Any]:
    """Wait for the prune; what it archived, pruned and dropped per table."""
    pruned_out, pruned_err = prune.communicate()
    if prune.returncode != 0:
        raise SystemExit(f"prune failed ({prune.returncode}): {pruned_err[-2000:]}")
    done = json.loads(pruned_out) if pruned_out.strip() else {"steps": [], "partitions": []}
    out: dict[str, Any] = {
        st["table"]: {"archived": st["archived"], "pruned": st["pruned"], "files": len(st["files"])}
        for st in done["steps"]
    }
    for p in done["partitions"]:
        t = out.setdefault(f"{p['table']}_partitions", {"archived": 0, "dropped": 0, "kept": 0})
        t["archived"] += p["archived"]
        t["dropped"] += 1 if p["dropped"] else 0
        t["kept"] += p["kept"]
    out["archive_bytes"] = sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())
    return out


def check_pruned_redeliveries(tmp: Path, full: str, n: int, now: datetime) -> dict[str, int]:
    old = tmp / "old.jsonl"
    n_old = old_redeliveries(old, full, n, now - timedelta(days=365))
    _, res = import_file(full, old)
    got: dict[str, int] = {}
    for r in res:
        got[r["decision"]] = got.get(r["decision"], 0) + 1
    if got != {"duplicate": n, "conflict": n}:
        raise SystemExit(f"pruned events re-delivered: {got} of {n_old}, not duplicates and conflicts")
    return got


def config_file(tmp: Path, archive: Path) -> Path:
    cfg = tmp / "ledger.yaml"
    cfg.write_text(
        "http: {listen: '127.0.0.1:1'}\nretention:\n  arrivals: 90d\n  notifications: 30d\n"
        f"  canonical_payloads: 365d\n  identity_horizon: 5y\n  reviewed: 365d\n  archive_dir: {archive}\n"
    )
    return cfg


def run(a: argparse.Namespace, cluster: pgcluster.Cluster, out: dict[str, Any]) -> None:
    now = datetime.now(UTC)
    make_template(cluster)
    full = fresh_db(cluster)
    out["fill"] = fill(full, a.arrivals, a.days, now)
    out["size_after_fill"] = sizes(full)
    out["bytes_per_day_of_traffic"] = round(out["size_after_fill"]["database"] / a.days)
    log(f"filled: {out['size_after_fill']['database'] / 1e9:.2f} GB")
    sampler = Sampler(full)
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="ledger-years-") as tmp_name:
        tmp = Path(tmp_name)
        archive = tmp / "archive"
        archive.mkdir()
        rounds = Rounds(cluster, full, tmp, a.lines)
        out["before_the_prune"] = rounds.phase("before the prune", a.rounds)
        log("prune started beside the intake")
        t0 = time.monotonic()
        prune = start_prune(full, config_file(tmp, archive))
        out["beside_the_prune"] = rounds.phase("beside the prune", a.rounds, beside=prune)
        out["prune"] = prune_summary(prune, archive)
        out["prune_s"] = round(time.monotonic() - t0, 1)
        out["size_after_prune"] = sizes(full)
        with psycopg.connect(full, autocommit=True) as conn:
            t0 = time.monotonic()
            conn.execute("VACUUM")
            out["vacuum_s"] = round(time.monotonic() - t0, 1)
        out["size_after_vacuum"] = sizes(full)
        out["after_the_prune"] = rounds.phase("after the prune", a.rounds)
        out["size_after_more_rounds"] = sizes(full)
        out["pruned_redeliveries_decided"] = check_pruned_redeliveries(tmp, full, a.old, now)
    sampler.stopped.set()
    sampler.join()
    out["full_vs_empty_beside_the_prune"] = out["beside_the_prune"]["full_vs_empty"]
    out["target_beside_the_prune_ge_0.8"] = out["full_vs_empty_beside_the_prune"] >= 0.8
    out["size_samples"] = sampler.samples[:: max(1, len(sampler.samples) // 40)]
    out["size_max"] = max(s for _, s in sampler.samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arrivals", type=int, default=20_000_000)
    ap.add_argument("--days", type=float, default=730.0)
    ap.add_argument("--lines", type=int, default=50_000, help="lines per intake round")
    ap.add_argument("--rounds", type=int, default=3, help="intake rounds per phase")
    ap.add_argument(
        "--old", type=int, default=1000, help="re-deliveries of pruned events (and as many conflicts)"
    )
    a = ap.parse_args()
    bindir = pgcluster.find_binaries()
    if bindir is None:
        print("bench/ledger_years.py: no PostgreSQL server binaries (initdb, pg_ctl)", file=sys.stderr)
        sys.exit(2)
    cluster = pgcluster.create(bindir, durable=True)
    cluster.stop()
    cluster.options = "-c shared_buffers=256MB -c max_wal_size=4GB -c checkpoint_timeout=15min"
    cluster.start()
    out: dict[str, Any] = {"bench": "ledger_years", "arrivals": a.arrivals, "days": a.days, "lines": a.lines}
    out["rounds"] = a.rounds
    try:
        run(a, cluster, out)
    finally:
        cluster.destroy()
    out["loadavg"] = os.getloadavg()
    out["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

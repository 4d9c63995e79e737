"""A fleet of gateways into the ledger: many MQTT sessions from one load process, through our own
Mosquitto, to one and then two `edge-agent ledger run` instances (a shared subscription) on one
PostgreSQL primary with a streaming standby; the standby synchronous or not, alternated.

* `--sessions` (default 1,000) gateway sessions, each its own MQTT connection and gateway name;
  half of them in redundant pairs (both members send the same events: one canonical, two
  arrivals), the other half alone. Each publishes one CloudEvent per message at QoS 1, paced so
  that the fleet offers `--rate` messages per second for `--seconds`.
* Variants, alternated over `--rounds` (medians): instances 1 or 2, x standby `sync`
  (`synchronous_standby_names = 'FIRST 1 (*)'`) or `nosync` (''): the same servers, a fresh
  database per run.
* Figures per variant: `arrivals_per_s` (committed arrivals over the time from the first publish
  to the last commit, polled every 0.2 s), `puback_ms` p50/p99 (publish to the broker's PUBACK, as
  a gateway sees it), `intake_ms` p50/p99 (the event's `arrivalat`, set at publish, to the
  ledger's `received_at`, set when its batch began: the ledger's queueing; the commit follows
  within the batch), `lost` (published minus arrivals after everything settled: must be 0).
  The baseline in the same run is the `nosync` variant; `sync_vs_nosync` is the ratio of rates.

    python bench/ledger_fleet.py                 # 1,000 sessions, 1,500 msg/s for 10 s, 3 rounds
    python bench/ledger_fleet.py --quick         # 20 sessions, 1 s, 2 instances, fsync off (CI smoke)

Prints ONE JSON line (with the load average before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))

import aiomqtt  # noqa: E402
import pgcluster  # noqa: E402
import psycopg  # noqa: E402
from mosquitto import MOSQUITTO, Broker  # noqa: E402

from agent.core.timestamps import format_timestamp  # noqa: E402

T0 = "2026-04-22T08:00:12.120Z"


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def body(run: str, gateway: str, source_no: int, k: int) -> bytes:
    from datetime import UTC, datetime

    now = format_timestamp(datetime.now(UTC))
    return json.dumps(
        {
            "specversion": "1.0",
            "id": f"B{run}:T{k}",
            "source": f"plant/PLC-{source_no}/Trip",
            "type": "io.edgeagent.transition",
            "time": T0,
            "datacontenttype": "application/json",
            "bootid": f"B{run}",
            "transitionid": f"T{k}",
            "arrivalat": now,
            "gateway": gateway,
            "attempt": 1,
            "replayed": False,
            "data": {"state": "Trip", "k": k},
        },
        separators=(",", ":"),
    ).encode()


async def session(
    port: int,
    run: str,
    index: int,
    sessions: int,
    per: int,
    interval: float,
    start: float,
    puback: list[float],
) -> int:
    """One gateway: `per` messages, one every `interval` s from `start` (+ its offset)."""
    pairs = sessions // 2
    source_no = index // 2 if index < pairs else index  # members of a pair share their events
    gateway = f"gw-{index}"
    quiet = logging.getLogger("bench.fleet")
    quiet.setLevel(logging.ERROR)
    sent = 0
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=f"{run}-{gateway}", logger=quiet, timeout=60
    ) as c:
        offset = interval * (index / sessions)
        await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
        for k in range(per):
            t = time.monotonic()
            await c.publish(
                f"fleet{run}/events/PLC-{source_no}/Trip", body(run, gateway, source_no, k), qos=1
            )
            puback.append((time.monotonic() - t) * 1000)
            sent += 1
            nxt = start + offset + (k + 1) * interval
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
    return sent


def arrivals(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM arrival").fetchone()
    return int(row[0]) if row else 0


def start_ledgers(work: Path, dsn: str, port: int, run: str, n: int) -> list[subprocess.Popen[bytes]]:
    """n `edge-agent ledger run` processes on one shared subscription, started at once; returns
    when every one has subscribed."""
    procs, logs = [], []
    for i in range(n):
        cfg = work / f"ledger-{run}-{i}.yaml"
        cfg.write_text(
            f"dsn: '{dsn}'\nmqtt: {{host: 127.0.0.1, port: {port}, topic: 'fleet{run}/events/#',"
            f" group: g{run}, client_id: ledger-{run}-{i}}}\n"
        )
        log = work / f"ledger-{run}-{i}.log"
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "agent", "ledger", "run", "-c", str(cfg)],
                stdout=subprocess.DEVNULL,
                stderr=log.open("ab"),
            )
        )
    deadline = time.monotonic() + 60
    for proc, log in zip(procs, logs, strict=True):
        while "mqtt intake subscribed" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"a ledger did not subscribe: {log.read_text()[-2000:]}")
            time.sleep(0.1)
    return procs


async def one_run(
    pair: pgcluster.Pair, broker: Broker, work: Path, args: argparse.Namespace, instances: int, sync: bool
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    names = "FIRST 1 (*)" if sync else ""
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'".encode())
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(f"CREATE DATABASE f_{run}".encode())
    pair.sync = sync
    pair.wait_streaming()
    dsn = pair.primary.dsn(f"f_{run}")
    ledgers = start_ledgers(work, dsn, broker.port, run, instances)
    try:
        per = max(1, round(args.rate * args.seconds / args.sessions))
        interval = args.seconds / per
        puback: list[float] = []
        start = time.monotonic() + 1.0 + args.sessions * 0.004  # every session connected first
        sent = sum(
            await asyncio.gather(
                *(
                    session(broker.port, run, i, args.sessions, per, interval, start, puback)
                    for i in range(args.sessions)
                )
            )
        )
        last, seen, still = time.monotonic(), -1, 0
        while True:
            got = await asyncio.to_thread(arrivals, dsn)
            if got != seen:
                last, still = time.monotonic(), 0
            else:
                still += 1
            seen = got
            if got >= sent or still >= 50:  # 10 s without a new arrival: what is missing is lost
                break
            await asyncio.sleep(0.2)
        with psycopg.connect(dsn) as conn:
            lat = [
                float(r[0])
                for r in conn.execute(
                    "SELECT extract(epoch FROM received_at - gateway_arrival_at) * 1000 FROM arrival"
                ).fetchall()
            ]
            canon = conn.execute("SELECT count(*) FROM canonical_event").fetchone()
    finally:
        for p in ledgers:
            p.send_signal(signal.SIGTERM)
        for p in ledgers:
            p.wait(timeout=60)
    elapsed = max(1e-6, last - start)
    pairs = args.sessions // 2
    return {
        "instances": instances,
        "standby": "sync" if sync else "nosync",
        "sent": sent,
        "arrivals": seen,
        "canonicals": int(canon[0]) if canon else 0,
        "canonicals_expected": (pairs // 2 + (args.sessions - pairs)) * per,
        "lost": sent - seen,
        "arrivals_per_s": round(seen / elapsed, 1),
        "puback_ms_p50": pct(puback, 0.5),
        "puback_ms_p99": pct(puback, 0.99),
        "intake_ms_p50": pct(lat, 0.5),
        "intake_ms_p99": pct(lat, 0.99),
    }


def loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    bindir = pgcluster.find_binaries()
    if bindir is None or MOSQUITTO is None:
        raise SystemExit("needs the PostgreSQL server binaries and mosquitto")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * args.sessions + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    work = Path(tempfile.mkdtemp(prefix="edge-ledger-fleet-"))
    broker = Broker(work)
    pair = pgcluster.Pair(bindir, sync=True, durable=not args.quick)
    before = loadavg()
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            for instances in args.instances:
                for sync in (False, True):  # alternated inside every round
                    runs.append(await one_run(pair, broker, work, args, instances, sync))
    finally:
        broker.stop()
        pair.destroy()
    out: dict[str, Any] = {
        "bench": "ledger_fleet",
        "sessions": args.sessions,
        "paired_sessions": args.sessions // 2,
        "offered_per_s": args.rate,
        "seconds": args.seconds,
        "rounds": args.rounds,
    }
    for instances in args.instances:
        for standby in ("nosync", "sync"):
            sel = [r for r in runs if r["instances"] == instances and r["standby"] == standby]
            key = f"x{instances}_{standby}"
            for fig in ("arrivals_per_s", "puback_ms_p50", "puback_ms_p99", "intake_ms_p50", "intake_ms_p99"):
                out[f"{key}_{fig}"] = statistics.median(r[fig] for r in sel)
            out[f"{key}_lost"] = sum(r["lost"] for r in sel)
            out[f"{key}_canonicals_ok"] = all(r["canonicals"] == r["canonicals_expected"] for r in sel)
        out[f"x{instances}_sync_vs_nosync"] = round(
            out[f"x{instances}_sync_arrivals_per_s"] / out[f"x{instances}_nosync_arrivals_per_s"], 3
        )
    out["lost"] = sum(r["lost"] for r in runs)
    out["runs"] = runs
    out["loadavg_before"] = before
    out["loadavg_after"] = loadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1500.0, help="messages per second offered by the fleet")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--quick", action="store_true", help="20 sessions, 100 msg/s for 1 s, 2 instances, 1 round, fsync off"
    )
    args = ap.parse_args()
    if args.quick:
        args.sessions, args.rate, args.seconds, args.rounds, args.instances = 20, 100.0, 1.0, 1, [2]
    logging.basicConfig(level=logging.WARNING)
    out = asyncio.run(main_async(args))
    print(json.dumps(out))
    if out["lost"]:
        sys.exit(1)


if __name__ == "__main__":
    main()

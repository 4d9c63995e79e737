"""The ledger through database failovers under load: the campaign the CI test runs once, by hand.

A primary and a streaming standby from the PostgreSQL binaries (durable: fsync on), our own
Mosquitto, the ledger's intakes in this process with a multi-host DSN. Two gateways send the same
N transitions (one over MQTT at QoS 1, one over HTTP in batches of 20, resending a refused batch
as it was) while the primary is killed (`pg_ctl stop -m immediate`) and the standby promoted
`--failovers` times, evenly spread over the burst; after each a fresh standby of the new primary
rejoins (synchronous again). The final primary is then read.

    python bench/ledger_failover.py                      # 5 failovers, 6,000 events, sync standby
    python bench/ledger_failover.py --async-standby      # the same with an asynchronous standby
    python bench/ledger_failover.py --quick              # 1 failover, 200 events, fsync off (CI smoke)
    python bench/ledger_failover.py --raw-commits        # PostgreSQL alone: async vs sync standby

`--raw-commits` is the research measurement behind the docs' warning, without the ledger: 8
writers commit one row each as fast as they can (autocommit), the primary is killed after 1 s
and the standby promoted; acknowledged rows missing on the new primary are counted, asynchronous
and synchronous standby alternated over `--rounds`. Printed, not asserted for async.

Prints ONE JSON line: events, failovers, acknowledged per gateway, canonicals and keys on the final
primary, arrivals per key (key: arrivals -> how many keys), deliveries with two arrivals, lost
(acknowledged deliveries missing on the final primary, per gateway), the load average. With a
synchronous standby `lost` must be 0 (exit 1 otherwise); with an asynchronous one it is measured
and printed, never asserted: it depends on how far the standby is behind when the primary dies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ledger"))

import pgcluster  # noqa: E402
from failover_burst import run_burst  # noqa: E402
from mosquitto import MOSQUITTO, Broker  # noqa: E402

from agent.ledger import failover  # noqa: E402


async def campaign(args: argparse.Namespace) -> dict[str, object]:
    bindir = pgcluster.find_binaries()
    if bindir is None or MOSQUITTO is None:
        raise SystemExit("needs the PostgreSQL server binaries and mosquitto")
    pair = pgcluster.Pair(bindir, sync=not args.async_standby, durable=not args.quick)
    work = Path(tempfile.mkdtemp(prefix="edge-ledger-failover-"))
    broker = Broker(work)
    try:
        marks = [(i + 1) / (args.failovers + 1) for i in range(args.failovers)]
        fig = await run_burst(
            pair, broker.port, n=args.events, failover_at=marks, rejoin=True, pace_s=args.pace, run="bench"
        )
    finally:
        broker.stop()
        pair.destroy()
    out: dict[str, object] = {
        "bench": "ledger_failover",
        "standby": "async" if args.async_standby else "sync",
    }
    out.update(fig.as_json())
    out["batches_rerun"] = failover.GAUGES.batches_rerun
    out["outages"] = failover.GAUGES.outages
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


def raw_round(
    bindir: Path, sync: bool, durable: bool, seconds: float = 1.0, writers: int = 8
) -> dict[str, object]:
    import threading
    import time

    import psycopg

    pair = pgcluster.Pair(bindir, sync=sync, durable=durable)
    try:
        with psycopg.connect(pair.primary.dsn(), autocommit=True) as c:
            c.execute("CREATE TABLE acked (id bigint PRIMARY KEY)")
        pair.wait_streaming()
        acked: list[list[int]] = [[] for _ in range(writers)]
        stop = threading.Event()

        def writer(w: int) -> None:
            n = w
            try:
                with psycopg.connect(pair.primary.dsn(), autocommit=True) as c:
                    while not stop.is_set():
                        c.execute("INSERT INTO acked VALUES (%s)", (n,))
                        acked[w].append(n)  # COMMIT answered: acknowledged
                        n += writers
            except psycopg.Error:
                return

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        lag = None
        with psycopg.connect(pair.primary.dsn(), autocommit=True) as c:
            row = c.execute(
                "SELECT extract(epoch FROM coalesce(max(flush_lag), '0'::interval)) * 1000 FROM pg_stat_replication"
            ).fetchone()
            lag = float(row[0]) if row else None
        pair.failover()
        stop.set()
        for t in threads:
            t.join(timeout=30)
        ids = {i for a in acked for i in a}
        with psycopg.connect(pair.primary.dsn()) as c:
            have = {int(r[0]) for r in c.execute("SELECT id FROM acked").fetchall()}
        return {
            "standby": "sync" if sync else "async",
            "fsync": durable,
            "acknowledged": len(ids),
            "lost": len(ids - have),
            "flush_lag_ms": lag,
        }
    finally:
        pair.destroy()


def raw_commits(rounds: int, durable: bool) -> dict[str, object]:
    bindir = pgcluster.find_binaries()
    if bindir is None:
        raise SystemExit("needs the PostgreSQL server binaries")
    runs = [raw_round(bindir, sync, durable) for _ in range(rounds) for sync in (False, True)]
    out: dict[str, object] = {"bench": "replication_loss", "rounds": rounds, "fsync": durable, "runs": runs}
    for kind in ("async", "sync"):
        sel = [r for r in runs if r["standby"] == kind]
        out[f"{kind}_lost"] = [r["lost"] for r in sel]
        out[f"{kind}_acknowledged"] = [r["acknowledged"] for r in sel]
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=6000)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--pace", type=float, default=0.002, help="seconds between an MQTT gateway's messages")
    ap.add_argument("--async-standby", action="store_true", help="asynchronous replication: loss is measured")
    ap.add_argument("--quick", action="store_true", help="1 failover, 200 events, fsync off (a smoke)")
    ap.add_argument("--raw-commits", action="store_true", help="PostgreSQL alone: async vs sync loss")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --raw-commits")
    ap.add_argument("--no-fsync", action="store_true", help="--raw-commits with fsync off (faster commits)")
    args = ap.parse_args()
    if args.raw_commits:
        raw = raw_commits(args.rounds, durable=not args.no_fsync)
        print(json.dumps(raw))
        sync_lost = raw["sync_lost"]
        sys.exit(1 if isinstance(sync_lost, list) and any(sync_lost) else 0)
    if args.quick:
        args.events, args.failovers = 200, 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    out = asyncio.run(campaign(args))
    print(json.dumps(out))
    lost = out["lost_deliveries"]
    assert isinstance(lost, dict)
    if not args.async_standby and (sum(lost.values()) or out["deliveries_with_two_arrivals"]):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The ledger through database failovers under load: the campaign the CI test runs once, by hand.

A primary and a streaming standby from the PostgreSQL binaries (durable: fsync on), our own
Mosquitto, the ledger's intakes in this process with a multi-host DSN. Two gateways send the same
N transitions (one over MQTT at QoS 1, one over HTTP in batches of 20, resending a refused batch
as it was) while the primary is killed (`pg_ctl stop -m immediate`) and the standby promoted
`--failovers` times, evenly spread over the burst; after each a fresh standby of the new primary
rejoins (synchronous again). The final primary is then read.

    python bench/ledger_failover.py                      # 5 failovers, 6,000 events, sync standby
    python bench/ledger_failover.py --async-standby      # the same with an asynchronous standby
    python bench/ledger_failover.py --quick              # 1 failover, 300 events (the CI smoke)

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
    pair = pgcluster.Pair(bindir, sync=not args.async_standby, durable=True)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=6000)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--pace", type=float, default=0.002, help="seconds between an MQTT gateway's messages")
    ap.add_argument("--async-standby", action="store_true", help="asynchronous replication: loss is measured")
    ap.add_argument("--quick", action="store_true", help="1 failover, 300 events")
    args = ap.parse_args()
    if args.quick:
        args.events, args.failovers = 300, 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    out = asyncio.run(campaign(args))
    print(json.dumps(out))
    lost = out["lost_deliveries"]
    assert isinstance(lost, dict)
    if not args.async_standby and (sum(lost.values()) or out["deliveries_with_two_arrivals"]):
        sys.exit(1)


if __name__ == "__main__":
    main()

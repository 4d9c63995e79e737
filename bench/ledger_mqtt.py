"""The ledger's MQTT intake against a lean set-based arbiter subscribed alike: whole processes.

Prints ONE JSON line. Our own Mosquitto (persistence, no queue limit) and our own PostgreSQL
cluster (fsync and synchronous_commit on; `track_commit_timestamp` on, so the clock stops at
the last batch's COMMIT). For each run a fresh database (from one migrated template) and a new
client id: its session is made first, then N messages (one CloudEvent each, as the gateway's
MQTT sink sends them) are published at QoS 1 and queued at the broker; then the subscriber's
process starts and drains them. The clock runs from the process's start (Python start-up,
imports, connecting, parsing included) to the COMMIT of the last arrival; then it gets SIGTERM.
Sides alternated over rounds (medians), at 0 % and 50 % re-deliveries:

* `ledger`: `python -m agent ledger --dsn DSN run -c ledger.yaml` with an `mqtt` intake
  (defaults: batch 1,000; PUBACK after COMMIT; the status intake beside it, as a user runs it);
* `lean`: `python bench/ledger_lean_mqtt.py`, a lean set-based arbiter written apart from the
  ledger's code (what it does: its docstring), the same session settings, batches and PUBACK
  after COMMIT, its own process.

The events are bench/ledger_import.py's files (bench/import_shapes.py's `outsider` events: floats,
non-ASCII text, several boots per source; at 50 % every second message re-delivers an event
drawn from the whole history so far, written as a second gateway would: `data`'s keys in another
order, `4.0` for `4`, `time` with another offset, the event's attributes in another order,
another `gateway`), each made a CloudEvent as a gateway writes one (`source` `plant/<device>/
<channel>`, `id` `<bootid>:<transitionid>`, its own `arrivalat`).

Figures per share: messages/s of each and their ratio; each process's CPU (user + system, start-up
included) and the server's CPU during the run per message, and the CPU ratio (the lean's CPU per
message over the ledger's: the figure to trust on a loaded machine); the drain rate (first COMMIT
to last, start-up left out, as a ledger that runs on sees it); the load average before and after.
After the timed rounds every message's decision, and which message's event it names, are
compared between the two sides (the bench exits non-zero when they differ).

    python bench/ledger_mqtt.py                 # 20,000 messages, 3 rounds
    python bench/ledger_mqtt.py --quick         # 200 messages, 1 round (the CI smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
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
sys.path.insert(0, str(ROOT / "tests" / "ledger"))

import aiomqtt  # noqa: E402
import pgcluster  # noqa: E402
import psycopg  # noqa: E402
from mosquitto import MOSQUITTO, Broker  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from bench import ledger_import  # noqa: E402
from bench.ledger_import import server_cpu_s, write_file  # noqa: E402
from bench.ledger_lean import SCHEMA as LEAN_SCHEMA  # noqa: E402

LEAN = str(ROOT / "bench" / "ledger_lean_mqtt.py")
GROUP = "ledger"
SUBSCRIPTION = f"$share/{GROUP}/plant/events/#"
SHARES = (0, 50)
POLL_S = 0.05


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def messages(n: int, dup_share: float) -> list[tuple[str, bytes]]:
    """(topic, body) of n messages: bench/ledger_import.py's lines, each made a CloudEvent."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        write_file(path, n, dup_share)
        lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        obj = json.loads(line)
        device, channel = obj["source"].split("/")
        again = obj["sourceTimestamp"].endswith("+02:00")  # how write_file writes a re-delivery
        ev: dict[str, Any] = {
            "specversion": "1.0",
            "id": f"{obj['bootId']}:{obj['transitionId']}",
            "source": f"plant/{device}/{channel}",
            "type": "io.edgeagent.transition",
            "time": obj["sourceTimestamp"],
            "datacontenttype": "application/json",
            "bootid": obj["bootId"],
            "transitionid": obj["transitionId"],
            "arrivalat": f"2026-04-22T09:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z",
            "identitybasis": "counter",
            "gateway": "gw-b" if again else "gw-a",
            "attempt": 1,
            "replayed": False,
            "data": obj["payload"],
        }
        if again:  # a second gateway writes the event's attributes in another order
            ev = dict(reversed(ev.items()))
        body = json.dumps(ev, ensure_ascii=line.isascii(), separators=(",", ":"))
        out.append((f"plant/events/{device}/transition", body.encode()))
    return out


async def make_session(port: int, ident: str) -> None:
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 86400
    async with aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=ident,
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=False,
        properties=props,
    ) as c:
        await c.subscribe(SUBSCRIPTION, qos=1)


async def drop_session(port: int, ident: str) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=ident, clean_start=True, protocol=aiomqtt.ProtocolVersion.V5
    ):
        pass


async def publish(port: int, msgs: list[tuple[str, bytes]]) -> None:
    quiet = logging.getLogger("bench.publisher")
    quiet.setLevel(logging.ERROR)  # aiomqtt warns about every publish beyond 10 in flight
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=f"pub-{uuid.uuid4().hex[:8]}", max_inflight_messages=200, logger=quiet
    ) as c:
        for start in range(0, len(msgs), 200):  # a window: each publish waits for its PUBACK
            await asyncio.gather(*(c.publish(t, m, qos=1) for t, m in msgs[start : start + 200]))


def make_template(cluster: pgcluster.Cluster) -> None:
    """The ledger's template (bench/ledger_import.py) with the lean arbiter's tables beside."""
    template = ledger_import.make_template(cluster)
    with psycopg.connect(template, autocommit=True) as c:
        c.execute(LEAN_SCHEMA.encode())


def fresh_db(cluster: pgcluster.Cluster) -> str:
    name = "b_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE bench_template".encode())
    return cluster.dsn(name)


def drop_db(cluster: pgcluster.Cluster, dsn: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name}".encode())


TABLE = {"ledger": "arrival", "lean": "lean_arrival"}


def command(side: str, dsn: str, port: int, ident: str, work: Path) -> list[str]:
    if side == "lean":
        return [sys.executable, LEAN, dsn, str(port), ident, SUBSCRIPTION]
    cfg = work / f"{ident}.yaml"
    cfg.write_text(
        f"mqtt:\n  host: 127.0.0.1\n  port: {port}\n  topic: plant/events/#\n  group: {GROUP}\n"
        f"  client_id: {ident}\n"
    )
    return [sys.executable, "-m", "agent", "ledger", "--dsn", dsn, "run", "-c", str(cfg)]


def one_run(
    broker: Broker, cluster: pgcluster.Cluster, side: str, msgs: list[tuple[str, bytes]], work: Path
) -> tuple[tuple[float, float, float, float], list[tuple[str, str, str | None]]]:
    """((messages/s, client CPU s, server CPU s, drain messages/s), each arrival's (raw, decision,
    canonical id) as text)."""
    n = len(msgs)
    dsn = fresh_db(cluster)
    ident = f"{side}-{uuid.uuid4().hex[:8]}"
    asyncio.run(make_session(broker.port, ident))
    asyncio.run(publish(broker.port, msgs))
    postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    cmd = command(side, dsn, broker.port, ident, work)
    table = TABLE[side]
    try:
        with psycopg.connect(dsn, autocommit=True) as watch:
            before = server_cpu_s(postmaster)
            t0 = time.time()
            log = (work / f"{ident}.log").open("wb")
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
            deadline = time.monotonic() + 60 + n / 100
            while True:
                got = watch.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()
                if got is not None and got[0] >= n:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    err = (work / f"{ident}.log").read_text(errors="replace")
                    raise SystemExit(f"{side}: {got} of {n} arrivals; exit {proc.poll()}:\n{err[-3000:]}")
                time.sleep(POLL_S)
            last = watch.execute(
                f"WITH c AS (SELECT pg_xact_commit_timestamp(xmin) AS ts FROM {table})"
                " SELECT extract(epoch FROM max(ts)), extract(epoch FROM min(ts)),"
                " count(*) FILTER (WHERE ts = (SELECT min(ts) FROM c)) FROM c".encode()
            ).fetchone()
            server = server_cpu_s(postmaster) - before
            proc.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                err = (work / f"{ident}.log").read_text(errors="replace")
                raise SystemExit(f"{side} exited {status}:\n{err[-3000:]}")
            log.close()
            cpu = usage.ru_utime + usage.ru_stime
            assert last is not None and last[0] is not None
            wall = float(last[0]) - t0
            # The drain: from the first batch's COMMIT to the last (no start-up, as a ledger that runs
            # on); 0 when a single batch took every message
            drain = (n - int(last[2])) / max(float(last[0]) - float(last[1]), 1e-3)
            rows = watch.execute(
                f"SELECT convert_from(raw, 'UTF8'), decision, canonical_id::text FROM {table}".encode()
            ).fetchall()
    finally:
        drop_db(cluster, dsn)
        asyncio.run(drop_session(broker.port, ident))  # the broker keeps no queue for it
    return (n / wall, cpu, server, drain), [(r[0], r[1], r[2]) for r in rows]


def decisions(
    msgs: list[tuple[str, bytes]], rows: list[tuple[str, str, str | None]]
) -> list[tuple[Any, ...]]:
    """(message, decision, the message that inserted the event it names) of every message, in order."""
    index = {body.decode(): i for i, (_, body) in enumerate(msgs)}
    by_msg = sorted((index[raw], decision, cid) for raw, decision, cid in rows)
    inserted_by = {cid: i for i, decision, cid in by_msg if decision == "inserted"}
    return [(i, decision, inserted_by.get(cid)) for i, decision, cid in by_msg]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 messages, 1 round (smoke)")
    ap.add_argument("-n", type=int, default=None, help="messages per run (default 20000)")
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    args = ap.parse_args()
    n = args.n or (200 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    bindir = pgcluster.find_binaries()
    if bindir is None or MOSQUITTO is None:
        print("bench/ledger_mqtt.py: needs PostgreSQL server binaries and mosquitto", file=sys.stderr)
        sys.exit(2)
    work = Path(f"/tmp/edge-ledger-bench-{uuid.uuid4().hex[:8]}")
    work.mkdir()
    load_before = loadavg()
    broker = Broker(work)
    cluster = pgcluster.create(bindir, durable=True)
    cluster.stop()
    cluster.options = "-c track_commit_timestamp=on"
    cluster.start()
    sides = ["ledger", "lean"]
    got: dict[str, list[tuple[float, float, float, float]]] = {}
    checked: dict[str, dict[str, int]] = {}
    try:
        make_template(cluster)
        data = {dup: messages(n, dup / 100) for dup in SHARES}
        last: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
        for rnd in range(rounds):
            for dup in SHARES:
                for side in sides if rnd % 2 == 0 else sides[::-1]:
                    figures, rows = one_run(broker, cluster, side, data[dup], work)
                    got.setdefault(f"{side}_dup{dup}", []).append(figures)
                    last[side, dup] = decisions(data[dup], rows)
        for dup in SHARES:  # after the timed rounds: every message decided alike on both sides
            a, b = last["ledger", dup], last["lean", dup]
            if a != b:
                diff = next(((x, y) for x, y in zip(a, b, strict=False) if x != y), (len(a), len(b)))
                raise SystemExit(f"ledger and lean arbiter decide differently at {dup} %: {diff}")
            counts: dict[str, int] = {}
            for r in a:
                counts[r[1]] = counts.get(r[1], 0) + 1
            checked[f"dup{dup}"] = counts
    finally:
        cluster.destroy()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"bench": "ledger_mqtt", "messages": n, "batch": 1000, "rounds": rounds}
    for dup in SHARES:
        for side in sides:
            runs = got[f"{side}_dup{dup}"]
            out[f"{side}_dup{dup}_msgs_per_s"] = round(statistics.median(r[0] for r in runs))
            out[f"{side}_dup{dup}_client_cpu_us"] = round(statistics.median(r[1] for r in runs) / n * 1e6, 1)
            out[f"{side}_dup{dup}_server_cpu_us"] = round(statistics.median(r[2] for r in runs) / n * 1e6, 1)
            out[f"{side}_dup{dup}_rounds"] = [round(r[0]) for r in runs]
            out[f"{side}_dup{dup}_drain_msgs_per_s"] = round(statistics.median(r[3] for r in runs))
        out[f"ledger_vs_lean_dup{dup}"] = round(
            out[f"ledger_dup{dup}_msgs_per_s"] / out[f"lean_dup{dup}_msgs_per_s"], 3
        )
        # The same comparison per CPU second: the lean's client CPU per message over the ledger's
        # (>= 0.7: the ledger spends at most 1/0.7 of the lean's CPU on a message), and with the
        # server's CPU added; the drain rates' ratio leaves the processes' start-up out.
        lean_cpu, ledger_cpu = out[f"lean_dup{dup}_client_cpu_us"], out[f"ledger_dup{dup}_client_cpu_us"]
        out[f"cpu_lean_vs_ledger_dup{dup}"] = round(lean_cpu / ledger_cpu, 3)
        out[f"cpu_with_server_lean_vs_ledger_dup{dup}"] = round(
            (lean_cpu + out[f"lean_dup{dup}_server_cpu_us"])
            / (ledger_cpu + out[f"ledger_dup{dup}_server_cpu_us"]),
            3,
        )
        drains = out[f"ledger_dup{dup}_drain_msgs_per_s"], out[f"lean_dup{dup}_drain_msgs_per_s"]
        out[f"drain_ledger_vs_lean_dup{dup}"] = round(drains[0] / drains[1], 3) if all(drains) else None
    out["decisions_checked"] = checked
    out["loadavg_before"] = load_before
    out["loadavg_after"] = loadavg()
    out["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

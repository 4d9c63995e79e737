"""The restore drill (issue 33 item 4): the ledger's database backed up and restored to a point in
time exactly as `docs/operations.md` ("Backing up the ledger and restoring it") says, then the
gateways resend what the restore lost and the ledger converges.

A throwaway cluster of the test's own, with the server's defaults (fsync on) and WAL archiving
(`wal_level = replica`, `archive_mode = on`, `archive_command` copying into a local directory);
the ledger runs in this process (`service.run`: HTTP intake and the notifier, one rule) and a
local webhook receiver counts the requests per `Idempotency-Key`.

1. base backup (`pg_basebackup -X none`: every WAL segment the restore needs comes from the archive);
2. batch A (keys 1..20 from gateway `gw-1`, attempt 1); the notifier sends their 20 notifications
   and marks them sent; then `pg_create_restore_point('drill')`;
3. batch B (keys 21..40, attempt 1, and keys 1..5 again with attempt 2); B's notifications sent;
   `pg_switch_wal()` so the archive holds WAL past the restore point; the server stopped;
4. restore: a fresh data directory from the base backup, `recovery.signal`, `restore_command`
   from the archive, `recovery_target_name = 'drill'`, `recovery_target_action = 'promote'`,
   started on the same port: the state is batch A's (20 canonicals, 20 arrivals, 20 notifications
   sent), on a new timeline, whose history file it archives into the same directory;
5. the gateway resends A and B as its outbox would (the same CloudEvents, the next attempt)
   through the ledger's HTTP intake: one canonical per key over A and B, every resent delivery an
   arrival (A's `duplicate`, B's `inserted`), no notification of A sent again, B's sent once more
   after the restore with the key they had before it.

The gateway here is the test posting CloudEvents of the gateway's shape (`outboxid`, `attempt`),
not an `edge-agent run` with a store: what an outbox or `edge-agent replay --since` sends is that.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from pgcluster import Cluster, create, free_port, own_directory
from webhook import Receiver

from agent.ledger import notifications, service
from agent.ledger.config import HttpIntake, LedgerConfig, NotifyRule
from agent.ledger.writer import Writer

pytestmark = pytest.mark.timeout(180)

T0 = "2026-04-22T08:00:12.120Z"
STORE = "5f0c6a3e-7d1b-4c53-9a0e-2b8f1d4c6e70"  # the gateway store's id in every `outboxid`
A = range(1, 21)
B = range(21, 41)
A_AGAIN = range(1, 6)  # re-delivered during B (attempt 2): their acknowledgement had been lost


def event(k: int, attempt: int) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"B-drill:T{k}",
        "source": f"plant/PLC-{k % 3}/Trip",
        "type": "io.edgeagent.transition",
        "time": T0,
        "datacontenttype": "application/json",
        "bootid": "B-drill",
        "transitionid": f"T{k}",
        "arrivalat": T0,
        "gateway": "gw-1",
        "outboxid": f"{STORE}:{k}",
        "attempt": attempt,
        "replayed": False,
        "data": {"state": "Trip", "k": k},
    }


def key_of(k: int) -> str:
    return notifications.idempotency_key(f"plant/PLC-{k % 3}/Trip", f"B-drill:T{k}", "trip")


ARCHIVING = """
# the ledger's backup (docs/operations.md, "Backing up the ledger and restoring it")
wal_level = replica
archive_mode = on
archive_command = 'test ! -f {archive}/%f && cp %p {archive}/%f'
"""

RECOVERY = """
# the restore (docs/operations.md): replay the archive up to the named restore point, then open
restore_command = 'cp {archive}/%f %p'
recovery_target_name = 'drill'
recovery_target_action = 'promote'
"""


@pytest.fixture
def drill(pg_cluster: Cluster) -> Iterator[dict[str, Cluster]]:
    """An archiving cluster (fsync on: the server's defaults); the test adds the restored one."""
    clusters: dict[str, Cluster] = {"original": create(pg_cluster.bindir, durable=True)}
    try:
        original = clusters["original"]
        archive = original.root / "wal-archive"
        archive.mkdir()
        own_directory(archive, original.user)
        with (original.datadir / "postgresql.conf").open("a") as f:
            f.write(ARCHIVING.format(archive=archive))
        original.stop()  # archive_mode needs a restart
        original.start()
        yield clusters
    finally:
        for c in reversed(list(clusters.values())):
            c.destroy()


def sql(cluster: Cluster, query: str) -> Any:
    with psycopg.connect(cluster.dsn(), autocommit=True, connect_timeout=10) as conn:
        return conn.execute(query.encode()).fetchall()


def ledger_state(cluster: Cluster) -> dict[str, Any]:
    return {
        "canonicals": sql(cluster, "SELECT count(*) FROM canonical_event")[0][0],
        "arrivals": dict(sql(cluster, "SELECT decision, count(*) FROM arrival GROUP BY 1")),
        "notifications": dict(sql(cluster, "SELECT state, count(*) FROM notification GROUP BY 1")),
    }


def run(cluster: Cluster, *args: str) -> None:
    proc = cluster._run(*args)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {proc.stderr or proc.stdout}")


async def post(port: int, events: list[dict[str, Any]]) -> list[str]:
    """One HTTP batch, resent until 200 (the ledger may still be starting); the decisions."""
    headers = {"Content-Type": "application/cloudevents-batch+json"}
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.post(f"http://127.0.0.1:{port}/", json=events, headers=headers) as r:
                    if r.status == 200:
                        return [x["decision"] for x in (await r.json())["results"]]
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the ledger never answered 200")


async def until_sent(cluster: Cluster, receiver: Receiver, n_rows: int, n_requests: int) -> None:
    async with asyncio.timeout(60):
        while True:
            sent = await asyncio.to_thread(
                sql, cluster, "SELECT count(*) FROM notification WHERE state = 'sent'"
            )
            if sent[0][0] == n_rows and sum(receiver.keys.values()) == n_requests:
                return
            await asyncio.sleep(0.1)


async def with_ledger(cluster: Cluster, receiver: Receiver, work: Any) -> Any:
    """The ledger (HTTP intake, notifier, one rule) running in this process while `work(port)` runs."""
    port = free_port()
    rule = NotifyRule("trip", receiver.url, source="*/Trip")
    config = LedgerConfig(cluster.dsn(), None, None, HttpIntake("127.0.0.1", port), (rule,), "drill")
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(config, stop=stop))
    try:
        return await work(port)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def restore(original: Cluster) -> Cluster:
    """A fresh data directory from the base backup, recovering to 'drill', on the original's port."""
    user = original.user
    root = Path(tempfile.mkdtemp(prefix="edge-ledger-pg-restored-"))
    own_directory(root, user)
    restored = Cluster(original.bindir, root, original.port, user, durable=True)
    # cp -a keeps the owner (the server's user) and the 0700 mode PostgreSQL wants
    subprocess.run(["cp", "-a", str(original.root / "base"), str(restored.datadir)], check=True)
    with (restored.datadir / "postgresql.conf").open("a") as f:
        f.write(RECOVERY.format(archive=original.root / "wal-archive"))
    signal_file = restored.datadir / "recovery.signal"
    signal_file.touch()
    if user is not None:
        shutil.chown(signal_file, user, user)
    restored.start()
    deadline = time.monotonic() + 60
    while sql(restored, "SELECT pg_is_in_recovery()")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the restored server did not promote within 60 s")
        time.sleep(0.1)
    return restored


async def test_a_point_in_time_restore_loses_the_commits_after_the_target_and_the_gateways_resends_converge(
    drill: dict[str, Cluster], receiver: Receiver
) -> None:
    original = drill["original"]
    t0 = time.monotonic()
    fig: dict[str, Any] = {}

    # the ledger's writer migrates on connect: run it once so the schema is in the base backup
    writer = Writer(original.dsn())
    await writer.connect_now()
    await writer.close()
    started = time.monotonic()
    await asyncio.to_thread(
        run, original, "pg_basebackup", "-h", "127.0.0.1", "-p", str(original.port), "-U", "postgres",
        "-D", str(original.root / "base"), "-X", "none", "-c", "fast",
    )  # fmt: skip
    fig["base_backup_s"] = round(time.monotonic() - started, 2)

    async def batch_a(port: int) -> list[str]:
        decisions = await post(port, [event(k, 1) for k in A])
        await until_sent(original, receiver, len(A), len(A))
        return decisions

    assert await with_ledger(original, receiver, batch_a) == ["inserted"] * len(A)
    before = await asyncio.to_thread(ledger_state, original)
    assert before == {"canonicals": 20, "arrivals": {"inserted": 20}, "notifications": {"sent": 20}}
    await asyncio.to_thread(sql, original, "SELECT pg_create_restore_point('drill')")

    async def batch_b(port: int) -> list[str]:
        decisions = await post(port, [event(k, 1) for k in B] + [event(k, 2) for k in A_AGAIN])
        await until_sent(original, receiver, len(A) + len(B), len(A) + len(B))
        return decisions

    decisions = await with_ledger(original, receiver, batch_b)
    assert decisions == ["inserted"] * len(B) + ["duplicate"] * len(A_AGAIN)
    lost = await asyncio.to_thread(ledger_state, original)
    assert lost == {
        "canonicals": 40,
        "arrivals": {"inserted": 40, "duplicate": 5},
        "notifications": {"sent": 40},
    }
    switched = await asyncio.to_thread(sql, original, "SELECT pg_walfile_name(pg_switch_wal())")
    async with asyncio.timeout(60):  # B's WAL in the archive: the restore has WAL past its target
        while not (original.root / "wal-archive" / switched[0][0]).exists():
            await asyncio.sleep(0.1)
    original.stop()
    fig["wal_segments_archived"] = len(
        [p for p in (original.root / "wal-archive").iterdir() if len(p.name) == 24]
    )

    started = time.monotonic()
    restored = drill["restored"] = await asyncio.to_thread(restore, original)
    fig["restore_s"] = round(time.monotonic() - started, 2)
    after = await asyncio.to_thread(ledger_state, restored)
    assert after == before, "the restore stopped at 'drill': batch A's state, nothing of B"
    timeline = "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"
    fig["timeline"] = (await asyncio.to_thread(sql, restored, timeline))[0][0]
    assert fig["timeline"] == 2, "promoted at the target: a new timeline"
    log = (restored.root / "server.log").read_text(errors="replace")
    assert 'recovery stopping at restore point "drill"' in log, log[-2000:]
    sent_before_restore = dict(receiver.keys)
    history = original.root / "wal-archive" / "00000002.history"
    async with asyncio.timeout(30):  # the restored server archives its new timeline (same settings)
        while not history.exists():
            await asyncio.sleep(0.1)

    async def resend(port: int) -> list[str]:
        # the gateway's outbox sends again what it holds, each with its next attempt
        again = [event(k, 3 if k in A_AGAIN else 2) for k in A] + [event(k, 2) for k in B]
        decisions = await post(port, again)
        await until_sent(restored, receiver, len(A) + len(B), 2 * len(B) + len(A))
        await asyncio.sleep(1.5)  # a notifier poll more: nothing else goes out
        return decisions

    decisions = await with_ledger(restored, receiver, resend)
    assert decisions == ["duplicate"] * len(A) + ["inserted"] * len(B)
    final = await asyncio.to_thread(ledger_state, restored)
    assert final == {
        "canonicals": 40,
        "arrivals": {"inserted": 40, "duplicate": 20},
        "notifications": {"sent": 40},
    }
    per_key = await asyncio.to_thread(
        sql, restored, "SELECT count(*) FROM canonical_event GROUP BY source, transition_id, boot_id"
    )
    assert sorted(n for (n,) in per_key) == [1] * 40, "one canonical per key over A and B"
    deliveries = await asyncio.to_thread(
        sql,
        restored,
        "SELECT ce_id, attempt, decision FROM arrival WHERE attempt >= 2 ORDER BY ce_id, attempt",
    )
    expected = sorted(
        [(f"B-drill:T{k}", 3 if k in A_AGAIN else 2, "duplicate") for k in A]
        + [(f"B-drill:T{k}", 2, "inserted") for k in B]
    )
    assert sorted(deliveries) == expected, "every resent delivery is an arrival, once"
    rows = await asyncio.to_thread(sql, restored, "SELECT idempotency_key, attempts FROM notification")
    assert {k: a for k, a in rows} == {key_of(k): 1 for k in [*A, *B]}, "the same keys as before the restore"
    assert {key_of(k): receiver.keys[key_of(k)] for k in A} == {key_of(k): 1 for k in A}, (
        "A's notifications were marked sent before the restore point: never sent again"
    )
    assert {key_of(k): sent_before_restore[key_of(k)] for k in B} == {key_of(k): 1 for k in B}
    assert {key_of(k): receiver.keys[key_of(k)] for k in B} == {key_of(k): 2 for k in B}, (
        "B's: once before the restore (their 'sent' mark lost with it), once after, the same key"
    )
    fig.update(
        before_restore=lost,
        after_restore=after,
        resend_decisions=dict(Counter(decisions)),
        after_resend=final,
        receiver_requests={
            "A": sum(receiver.keys[key_of(k)] for k in A),
            "B": sum(receiver.keys[key_of(k)] for k in B),
        },
        seconds=round(time.monotonic() - t0, 1),
    )
    print(json.dumps(fig))

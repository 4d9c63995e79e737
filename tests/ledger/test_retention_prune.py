"""`ledger prune` on a real PostgreSQL (ledger.md "Retention and the identity horizon"): a pruned
key's re-delivery is still `duplicate` or `conflict`, never a second canonical; a key past the
identity horizon is `beyond_horizon`; open conflicts and pending arrivals (and their arrivals)
survive; every pruned row is in the archive and its manifest verifies; an archive that cannot be
written stops the prune with nothing deleted; `--dry-run` deletes nothing."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent.core.intake import parse_delivery
from agent.ledger import arbiter, archive, prune, report, review
from agent.ledger.arrivals import Arrival
from agent.ledger.config import NotifyRule
from agent.ledger.retention_config import DAY, YEAR, RetentionSettings

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
NOW = datetime.now(UTC).replace(microsecond=0)
LATER = NOW + timedelta(days=400)  # the prune's clock: every row written now is old by then
RECENT_TS = (NOW - timedelta(days=10)).isoformat().replace("+00:00", "Z")
ANCIENT_TS = (NOW - timedelta(days=6 * 365)).isoformat().replace("+00:00", "Z")


def settings(tmp_path: Path, **kw: Any) -> RetentionSettings:
    base: dict[str, Any] = {
        "arrivals_s": 90 * DAY,
        "notifications_s": 30 * DAY,
        "canonical_payloads_s": 365 * DAY,
        "identity_horizon_s": 5 * YEAR,
        "reviewed_s": 365 * DAY,
        "batch": 100,
    }
    base.update(kw)
    return RetentionSettings(str(tmp_path / "archive"), **base)


def line(tid: str, payload: Any = 1, *, ts: str | None = RECENT_TS, boot: str | None = "B1") -> str:
    obj: dict[str, Any] = {"source": "P/T", "transitionId": tid, "payload": {"v": payload}}
    if boot is not None:
        obj["bootId"] = boot
    if ts is not None:
        obj["sourceTimestamp"] = ts
    return json.dumps(obj)


async def record(
    conn: Conn,
    lines: list[str],
    *,
    gateway: str = "gw-1",
    now: datetime = NOW,
    horizon_s: float | None = 5 * YEAR,
    rules: list[NotifyRule] | None = None,
) -> list[str]:
    at = now.isoformat().replace("+00:00", "Z")
    arrivals = [
        Arrival(parse_delivery(t, arrival_at=at, receiver="t", line=n), gateway, "import")
        for n, t in enumerate(lines, 1)
    ]
    outcomes = await arbiter.record(conn, arrivals, now=now, horizon_s=horizon_s, rules=rules or ())
    return [oc.decision.value for oc in outcomes]


async def scalar(conn: Conn, sql: str) -> Any:
    cur = await conn.execute(sql.encode())
    row = await cur.fetchone()
    await conn.rollback()
    return None if row is None else row[0]


async def ids(conn: Conn, sql: str) -> set[int]:
    cur = await conn.execute(sql.encode())
    got = {int(r[0]) for r in await cur.fetchall()}
    await conn.rollback()
    return got


def archived_rows(directory: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted((directory / table).glob("*.jsonl.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            rows += [json.loads(x) for x in fh]
    return rows


@pytest.mark.parametrize("one_batch", [True, False], ids=["one batch", "batch of one"])
async def test_a_pruned_keys_redelivery_is_still_duplicate_or_conflict_never_a_second_canonical(
    ledger_conn: Conn, tmp_path: Path, one_batch: bool
) -> None:
    assert await record(ledger_conn, [line("T1", 1), line("T2", 2)]) == ["inserted", "inserted"]
    ids_before = await ids(ledger_conn, "SELECT id FROM canonical_event")
    result = await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    by_table = {s.table: s for s in result.steps}
    assert by_table["arrival"].pruned == 1, "the other is the evidence of boot B1: kept"
    assert by_table["canonical_payload"].pruned == 2
    assert by_table["canonical_identity"].pruned == 0, "inside the identity horizon: the identities stay"
    assert await ids(ledger_conn, "SELECT id FROM arrival") == await ids(
        ledger_conn, "SELECT arrival_id FROM boot"
    )
    assert await scalar(ledger_conn, "SELECT count(*) FROM canonical_event WHERE payload IS NULL") == 2

    again = [line("T1", 1), line("T2", 999)]  # the same content, and other content
    if one_batch:
        got = await record(ledger_conn, again, gateway="gw-2", now=LATER)
    else:
        got = [d for x in again for d in await record(ledger_conn, [x], gateway="gw-2", now=LATER)]
    assert got == ["duplicate", "conflict"], "decided against the compact identity, as against the full row"
    assert await ids(ledger_conn, "SELECT id FROM canonical_event") == ids_before, "never a second canonical"
    cur = await ledger_conn.execute("SELECT canonical_id, payload FROM conflict")
    (cid, payload), *_ = await cur.fetchall()
    await ledger_conn.rollback()
    assert cid in ids_before and json.loads(payload) == {"v": 999}, "the conflicting content kept for review"
    pruned = {r["transition_id"]: r for r in archived_rows(tmp_path / "archive", "canonical_payload")}
    assert json.loads(pruned["T2"]["payload"]) == {"v": 2}, "the pruned canonical's payload is in the archive"
    conflicts = [c async for c in report.conflicts(ledger_conn)]
    assert conflicts[0]["canonical"]["payload"] is None and conflicts[0]["conflicting"]["payload"] == {
        "v": 999
    }


async def test_a_key_past_the_identity_horizon_is_beyond_horizon_after_its_identity_is_pruned(
    ledger_conn: Conn, tmp_path: Path
) -> None:
    # Recorded before retention was configured: no horizon then, an ancient event is inserted.
    assert await record(ledger_conn, [line("OLD", 1, ts=ANCIENT_TS)], horizon_s=None) == ["inserted"]
    result = await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    assert {s.table: s.pruned for s in result.steps}["canonical_identity"] == 1
    assert await scalar(ledger_conn, "SELECT count(*) FROM canonical_event") == 0
    got = await record(ledger_conn, [line("OLD", 1, ts=ANCIENT_TS)], gateway="gw-2", now=LATER)
    assert got == ["beyond_horizon"], "the ledger cannot know: it does not guess"
    assert await scalar(ledger_conn, "SELECT count(*) FROM canonical_event") == 0
    assert await scalar(ledger_conn, "SELECT count(*) FROM pending") == 1
    (identity,) = archived_rows(tmp_path / "archive", "canonical_identity")
    assert identity["transition_id"] == "OLD" and identity["payload"] is None


async def test_open_conflicts_and_pending_arrivals_survive_with_their_arrivals(
    ledger_conn: Conn, tmp_path: Path
) -> None:
    got = await record(ledger_conn, [line("K", 1), line("K", 2), line("NB", boot=None), line("P", 3)])
    assert got == ["inserted", "conflict", "identity_incomplete", "inserted"]
    kept = await ids(ledger_conn, "SELECT arrival_id FROM conflict UNION SELECT arrival_id FROM pending")
    booted = await ids(ledger_conn, "SELECT arrival_id FROM boot WHERE arrival_id IS NOT NULL")
    assert len(kept) == 2 and booted
    await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    left = await ids(ledger_conn, "SELECT id FROM arrival")
    assert kept | booted <= left, "an open conflict's, a pending arrival's and a boot's evidence stay"
    payloads = await ids(ledger_conn, "SELECT id FROM canonical_event e WHERE payload IS NOT NULL")
    conflicted = await ids(ledger_conn, "SELECT canonical_id FROM conflict")
    assert payloads == conflicted, "the conflicted canonical keeps its payload; the other is pruned"
    assert await scalar(ledger_conn, "SELECT count(*) FROM conflict") == 1
    assert await scalar(ledger_conn, "SELECT count(*) FROM pending") == 1

    # Reviewed: gone after `reviewed`, with their marks; archived first.
    (conflict_arrival,) = await ids(ledger_conn, "SELECT arrival_id FROM conflict")
    await review.mark(ledger_conn, conflict_arrival, "checked with the plant: sensor swapped", "ops")
    await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    assert await scalar(ledger_conn, "SELECT count(*) FROM conflict") == 0
    assert await scalar(ledger_conn, "SELECT count(*) FROM review_mark") == 0
    assert await scalar(ledger_conn, "SELECT count(*) FROM pending") == 1, "not reviewed: still kept"
    assert conflict_arrival not in await ids(ledger_conn, "SELECT id FROM arrival")
    (reviewed,) = archived_rows(tmp_path / "archive", "reviewed")
    assert reviewed["arrival_id"] == conflict_arrival and reviewed["review_marks"][0]["marked_by"] == "ops"
    assert reviewed["conflict"]["payload"] == '{"v":2}'


async def test_the_archive_holds_every_pruned_row_and_verifies_and_a_corrupted_file_fails(
    ledger_conn: Conn, tmp_path: Path
) -> None:
    rules = [NotifyRule("all", "http://127.0.0.1:1/x")]
    await record(ledger_conn, [line(f"T{i}", i) for i in range(250)], rules=rules)
    await record(ledger_conn, [line(f"T{i}", i) for i in range(250)], gateway="gw-2")
    await ledger_conn.execute("UPDATE notification SET state = 'sent', sent_at = %s", (NOW,))
    await ledger_conn.commit()
    arrivals_before = await ids(
        ledger_conn,
        "SELECT id FROM arrival a WHERE NOT EXISTS (SELECT 1 FROM boot b WHERE b.arrival_id = a.id)",
    )
    notes_before = await ids(ledger_conn, "SELECT id FROM notification")
    result = await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    steps = {s.table: s for s in result.steps}
    assert steps["arrival"].pruned == steps["arrival"].archived == 499  # one is boot B1's evidence
    assert steps["notification"].pruned == 250 and steps["canonical_payload"].pruned == 250
    gone = arrivals_before - await ids(ledger_conn, "SELECT id FROM arrival")
    assert {r["id"] for r in archived_rows(tmp_path / "archive", "arrival")} == gone == arrivals_before
    assert {r["id"] for r in archived_rows(tmp_path / "archive", "notification")} == notes_before
    files = archive.files_under(tmp_path / "archive")
    assert files and all(archive.verify(f) == [] for f in files)
    manifest = json.loads(Path(str(files[0]) + archive.MANIFEST).read_text())
    assert manifest["sha256"] == archive.sha256_of(files[0]) and manifest["rows"] > 0

    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    assert any("sha256" in p for p in archive.verify(files[0])), "a corrupted file fails verify"


async def test_an_archive_that_cannot_be_written_stops_the_prune_with_nothing_deleted(
    ledger_conn: Conn, tmp_path: Path
) -> None:
    await record(ledger_conn, [line("T1"), line("T2")])
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive directory should be")
    bad = RetentionSettings(str(blocker / "archive"))
    with pytest.raises(archive.ArchiveError, match="could not be written"):
        await prune.prune(ledger_conn, bad, now=LATER)
    assert await scalar(ledger_conn, "SELECT count(*) FROM arrival") == 2
    assert await scalar(ledger_conn, "SELECT count(*) FROM canonical_event WHERE payload IS NOT NULL") == 2
    cur = await ledger_conn.execute("SELECT outcome, error FROM retention_run ORDER BY id DESC LIMIT 1")
    outcome, error = await cur.fetchone()  # type: ignore[misc]
    await ledger_conn.rollback()
    assert outcome == "archive_failed" and "Not a directory" in error


async def test_a_dry_run_deletes_nothing_and_counts_what_the_prune_then_takes(
    ledger_conn: Conn, tmp_path: Path
) -> None:
    await record(ledger_conn, [line("T1"), line("T2"), line("T1", 5)])
    dry = await prune.prune(ledger_conn, settings(tmp_path), now=LATER, dry_run=True)
    assert dry.run_id is None and not (tmp_path / "archive").exists()
    assert await scalar(ledger_conn, "SELECT count(*) FROM arrival") == 3
    assert await scalar(ledger_conn, "SELECT count(*) FROM retention_run") == 0
    would = {s.table: s.archived for s in dry.steps}
    assert would["arrival"] == 1 and would["canonical_payload"] == 1  # the conflict's and the boot's stay
    done = await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    assert {s.table: s.pruned for s in done.steps} == would


async def test_one_prune_at_a_time(ledger_dsn: str, ledger_conn: Conn, tmp_path: Path) -> None:
    from agent.ledger.connection import connect

    other = await connect(ledger_dsn)
    try:
        await other.execute("SELECT pg_advisory_lock(%s)", (prune.LOCK_ID,))
        await other.commit()
        with pytest.raises(prune.PruneBusy):
            await prune.prune(ledger_conn, settings(tmp_path), now=LATER)
    finally:
        await other.close()

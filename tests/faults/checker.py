"""The one checker of the fault suite: what the store committed against what the upstream saw.

Every fault test (and `bench/faults.py`, the long form) ends with `check(...)`:

* lost: keys that were once seen committed in the store (the source-side acknowledgement:
  `Tracker.snapshot` reads them after every kill or fault) or that the simulated controllers
  made, and are not in the store now. With `gaps_accounted=True` (campaigns where a controller's
  ring may overrun while the agent is down) a made key that was never committed and lies inside
  a gap or overrun record of its source and boot is accounted, not lost (`Verdict.inside_gaps`);
  a committed key that disappears is lost whatever the records say;
* duplicates: keys with more than one canonical event (the unique index forbids it);
* without outbox: canonical events lacking an outbox row for a configured upstream;
* undelivered: outbox rows not marked delivered after the drain;
* upstream: the distinct CloudEvents (source, id) pairs of transitions seen upstream must equal
  the committed set exactly (nothing missing, nothing invented);
* integrity: `PRAGMA integrity_check` is `ok`;
* crash: the agent's log holds no traceback (a crash loop shows up as tracebacks and restarts).

This file is loaded by `conftest.py` and by `bench/faults.py` (no package: the suite runs with
`--import-mode=importlib`); it reads the store with the standard `sqlite3` module, read-only,
so it can look while the agent runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

Key = tuple[str, str, str]  # (source, transitionId, bootId)
TRANSITION = "io.edgeagent.transition"


def pct(text: str) -> str:
    """The contract's percent-encoding (docs/contract.md section 4), kept here on purpose: the
    checker must not share the code it checks."""
    return quote(text, safe="", encoding="utf-8")


def cloud_id(site: str, key: Key) -> tuple[str, str]:
    """The CloudEvents (source, id) of a transition key."""
    source, tid, boot = key
    device, _, channel = source.partition("/")
    return f"{site}/{pct(device)}/{pct(channel)}", f"{pct(boot)}:{pct(tid)}"


def connect_ro(db: Path) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    con.execute("PRAGMA busy_timeout=10000")
    return con


def committed_keys(db: Path) -> dict[Key, int]:
    """Canonical events of the store: key -> number of canonical rows (1 unless broken)."""
    if not db.exists():
        return {}
    con = connect_ro(db)
    try:
        rows = con.execute(
            "SELECT source, transition_id, boot_id, count(*) FROM events GROUP BY 1, 2, 3"
        ).fetchall()
    except sqlite3.OperationalError:  # not created yet (killed before the first migration)
        return {}
    finally:
        con.close()
    return {(r[0], r[1], r[2]): int(r[3]) for r in rows}


def integrity(db: Path) -> str:
    if not db.exists():
        return "ok"
    con = connect_ro(db)
    try:
        return "; ".join(str(r[0]) for r in con.execute("PRAGMA integrity_check").fetchall())
    except sqlite3.DatabaseError as exc:  # damaged beyond what integrity_check can walk
        return f"integrity_check failed: {exc}"
    finally:
        con.close()


@dataclass
class Tracker:
    """Accumulates the keys seen committed over a run (each was acknowledged once committed)."""

    db: Path
    acknowledged: set[Key] = field(default_factory=set)
    integrity_failures: list[str] = field(default_factory=list)
    snapshots: int = 0

    def snapshot(self, *, check_integrity: bool = True) -> int:
        """Read the store now; returns the number of committed keys."""
        keys = committed_keys(self.db)
        self.acknowledged |= set(keys)
        self.snapshots += 1
        if check_integrity:
            verdict = integrity(self.db)
            if verdict != "ok":
                self.integrity_failures.append(f"after snapshot {self.snapshots}: {verdict}")
        return len(keys)


@dataclass
class Verdict:
    committed: int
    acknowledged: int
    made: int
    lost: list[Key]
    duplicates: list[Key]
    without_outbox: int
    undelivered: int
    upstream_distinct: int
    upstream_missing: list[tuple[str, str]]
    upstream_invented: list[tuple[str, str]]
    integrity: list[str]
    tracebacks: int
    inside_gaps: int = 0  # made, never committed, inside a gap or overrun record (gaps_accounted)

    def problems(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} committed or made events lost, e.g. {self.lost[:3]}")
        if self.duplicates:
            out.append(f"{len(self.duplicates)} keys with more than one canonical: {self.duplicates[:3]}")
        if self.without_outbox:
            out.append(f"{self.without_outbox} canonical events without their outbox rows")
        if self.undelivered:
            out.append(f"{self.undelivered} outbox rows not delivered after the drain")
        if self.upstream_missing:
            out.append(f"{len(self.upstream_missing)} committed events never seen upstream")
        if self.upstream_invented:
            out.append(f"{len(self.upstream_invented)} upstream events that were never committed")
        if self.integrity:
            out.append(f"integrity_check: {self.integrity[:3]}")
        if self.tracebacks:
            out.append(f"{self.tracebacks} tracebacks in the agent's log")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def figures(self) -> dict[str, Any]:
        return {
            "committed": self.committed,
            "acknowledged": self.acknowledged,
            "made": self.made,
            "lost": len(self.lost),
            "inside_gaps": self.inside_gaps,
            "duplicates": len(self.duplicates),
            "canonical_without_outbox": self.without_outbox,
            "undelivered": self.undelivered,
            "upstream_distinct": self.upstream_distinct,
            "upstream_missing": len(self.upstream_missing),
            "upstream_invented": len(self.upstream_invented),
            "integrity_failures": len(self.integrity),
            "tracebacks": self.tracebacks,
        }


def check(
    db: Path,
    *,
    site: str,
    upstream_events: Iterable[dict[str, Any]] | None,
    tracker: Tracker | None = None,
    made: Iterable[Key] = (),
    log: Path | None = None,
    gaps_accounted: bool = False,
) -> Verdict:
    """Compare the store with the upstream after the drain. `upstream_events`: CloudEvents dicts
    as received (None: no upstream in this test, skip the upstream comparison). `gaps_accounted`:
    a made key inside a gap or overrun record of its source and boot is not lost (see above)."""
    keys = committed_keys(db)
    made_set = set(made)
    acknowledged = tracker.acknowledged if tracker is not None else set()
    missing_made = made_set - set(keys)
    inside: set[Key] = set()
    if gaps_accounted:
        gaps = gap_ranges(db)
        inside = {k for k in missing_made - acknowledged if in_gap(k, gaps)}
    lost = sorted((acknowledged - set(keys)) | (missing_made - inside))
    con = connect_ro(db)
    try:
        ups = [r[0] for r in con.execute("SELECT name FROM upstreams").fetchall()]
        without = sum(
            int(
                con.execute(
                    "SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM outbox o"
                    " WHERE o.upstream = ? AND o.kind = 'transition' AND o.ref_id = e.canonical_id)",
                    (u,),
                ).fetchone()[0]
            )
            for u in ups
        )
        undelivered = int(con.execute("SELECT count(*) FROM outbox WHERE state <> 'delivered'").fetchone()[0])
    finally:
        con.close()
    committed_ids = {cloud_id(site, k) for k in keys}
    seen: set[tuple[str, str]] = set()
    if upstream_events is not None:
        seen = {(e["source"], e["id"]) for e in upstream_events if e.get("type") == TRANSITION}
    failures = list(tracker.integrity_failures) if tracker is not None else []
    final = integrity(db)
    if final != "ok":
        failures.append(f"final: {final}")
    return Verdict(
        committed=len(keys),
        acknowledged=len(acknowledged),
        made=len(made_set),
        lost=lost,
        duplicates=sorted(k for k, n in keys.items() if n > 1),
        without_outbox=without,
        undelivered=undelivered if upstream_events is not None else 0,
        upstream_distinct=len(seen),
        upstream_missing=sorted(committed_ids - seen) if upstream_events is not None else [],
        upstream_invented=sorted(seen - committed_ids),
        integrity=failures,
        tracebacks=log.read_text(errors="replace").count("Traceback") if log and log.exists() else 0,
        inside_gaps=len(inside),
    )


@dataclass
class Accounting:
    """Every transition a simulator made, accounted for: canonical, inside a gap or overrun
    record of its source and boot, or lost silently (the promise: none)."""

    made: int
    canonical: int
    inside_gaps: int
    lost_silently: list[Key]

    def figures(self) -> dict[str, int]:
        return {
            "made": self.made,
            "canonical": self.canonical,
            "inside_gaps": self.inside_gaps,
            "lost_silently": len(self.lost_silently),
        }


Gaps = dict[tuple[str, str], list[tuple[int, int]]]  # (source, boot) -> inclusive ranges


def gap_ranges(db: Path) -> Gaps:
    """The transitionId ranges of the store's gap and overrun records, per source and boot."""
    if not db.exists():
        return {}
    con = connect_ro(db)
    try:
        ranges = con.execute(
            "SELECT source, boot_id, from_value, to_value FROM anomalies WHERE kind IN ('gap', 'overrun')"
        ).fetchall()
    except sqlite3.OperationalError:  # not created yet (killed before the first migration)
        return {}
    finally:
        con.close()
    gaps: Gaps = {}
    for source, boot, lo, hi in ranges:
        gaps.setdefault((source, boot), []).append((int(lo), int(hi)))
    return gaps


def in_gap(key: Key, gaps: Gaps) -> bool:
    """Whether a key lies inside a gap or overrun record of its own source and boot."""
    return any(lo <= int(key[1]) <= hi for lo, hi in gaps.get((key[0], key[2]), []))


def account(db: Path, made: Iterable[Key]) -> Accounting:
    """Sort the made keys into canonical / inside a gap or overrun record / lost silently."""
    keys = set(committed_keys(db))
    gaps = gap_ranges(db)
    made_set = set(made)
    canonical = {k for k in made_set if k in keys}
    inside = {k for k in made_set - canonical if in_gap(k, gaps)}
    return Accounting(len(made_set), len(canonical), len(inside), sorted(made_set - canonical - inside))

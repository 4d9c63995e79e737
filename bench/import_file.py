"""End-to-end import benchmark: `edge-agent import --json` of a JSON Lines file, as a real process.

Prints ONE JSON line. The file has N lines (default 100,000), half of them re-deliveries of
an earlier line's event. Each round runs, alternated (`--rounds`, default 3; medians):

* agent: `python -m agent --db <new store> import <file> --json` (start-up, parse,
  normalise, hash, decide, commit with synchronous=FULL, one result line per input line
  printed after its commit);
* baseline: a minimal correct importer, also its own process (`--minimal`), plain stdlib: it
  does per line what the contract (docs/contract.md) asks of any importer,
  and nothing of the agent's own (no config, no pipeline, no review tables). Per batch of
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

    python bench/import_file.py [--lines 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rounds import alternate, median, ratio


def write_file(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            k = i if i % 2 == 0 else max(0, i - 101)  # every second line re-delivers an earlier event
            f.write(
                json.dumps(
                    {
                        "source": f"PUMP-{k % 300:03d}/Trip",
                        "transitionId": f"T{k}",
                        "bootId": "B17",
                        "sourceTimestamp": f"2026-04-22T08:{(k // 6000) % 60:02d}:{(k // 100) % 60:02d}.{k % 1000:03d}Z",
                        "arrivalAt": "2026-04-22T09:00:00.000Z",
                        "payload": {
                            "state": "Trip" if k % 2 else "Normal",
                            "severity": "High",
                            "value": k % 97,
                        },
                    }
                )
                + "\n"
            )


CPU_S: dict[str, list[float]] = {"agent": [], "baseline": []}


def timed_process(cmd: list[str], cpu: str | None = None) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of one process; stdout discarded. Its CPU (user + system, with
    that of the children it waited for: the agent's parsing process) goes to CPU_S[cpu]."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.read().decode() if proc.stderr else status}")
    if cpu is not None:
        CPU_S[cpu].append(usage.ru_utime + usage.ru_stime)
    return elapsed, int(usage.ru_maxrss)


def agent_cmd(db: Path, file: Path) -> list[str]:
    return [sys.executable, "-m", "agent", "--db", str(db), "import", str(file), "--json"]


def minimal_cmd(db: Path, file: Path, lean: bool = False) -> list[str]:
    return [sys.executable, __file__, "--minimal-lean" if lean else "--minimal", str(db), str(file)]


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


# --- the baseline: a minimal correct importer (--minimal) ------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-])(\d\d):(\d\d))"
)
_NORMAL = re.compile(r"\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{3}Z", re.ASCII)


class Refused(ValueError):
    """A line the contract says is `rejected` (section 2), with the reason."""


@functools.lru_cache(maxsize=4096)
def _day_exists(day: str) -> bool:
    try:
        datetime.date(int(day[:4]), int(day[5:7]), int(day[8:10]))
    except ValueError:
        return False
    return True


def normal_ts(text: object, name: str) -> str | None:
    """Contract section 1: RFC 3339 with offset -> UTC, milliseconds (finer digits cut); else Refused."""
    if text is None:
        return None
    if type(text) is not str:
        raise Refused(f"{name} is not RFC 3339 text")
    if _NORMAL.fullmatch(text) and _day_exists(text[:10]):
        return text  # already in normal form: the common case
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise Refused(f"{name} {text!r} is not RFC 3339 with offset")
    y, mo, d, h, mi, s = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    ms = int((m.group(7) or "0")[:3].ljust(3, "0"))
    if s == 60:  # a leap second: the last millisecond of its minute
        s, ms = 59, 999
    try:
        tz = datetime.UTC
        if m.group(8):
            oh, om = int(m.group(9)), int(m.group(10))
            if oh > 23 or om > 59:
                raise ValueError("offset out of range")
            off = datetime.timedelta(hours=oh, minutes=om)
            tz = datetime.timezone(off if m.group(8) == "+" else -off)
        u = datetime.datetime(y, mo, d, h, mi, s, ms * 1000, tzinfo=tz).astimezone(datetime.UTC)
    except (ValueError, OverflowError) as exc:
        raise Refused(f"{name} {text!r} is not a valid instant: {exc}") from exc
    return u.strftime("%Y-%m-%dT%H:%M:%S.") + f"{u.microsecond // 1000:03d}Z"


def _id(obj: dict[str, Any], name: str) -> str | None:
    """Contract section 1: an id is text, an integer is its decimal text; missing/null/empty -> None."""
    v = obj.get(name)
    if type(v) is str:
        return v or None
    if v is None:
        return None
    if type(v) is int:
        return str(v)
    raise Refused(f"{name} must be text or an integer")


def _es_number(f: float) -> str:
    """RFC 8785 number: ECMAScript's shortest form (so 1.0 is 1, 1e-7 is 1e-7, 1e20 is written out)."""
    if f != f or f in (float("inf"), float("-inf")):
        raise Refused("NaN or Infinity is not JSON")
    if f == 0:
        return "0"
    r = repr(abs(f))
    m, _, e = r.partition("e")
    ip, _, fp = m.partition(".")
    if ip == "0":
        digits = fp.lstrip("0")
        n = (len(digits) - len(fp)) + int(e or 0)
    else:
        digits = ip + fp
        n = len(ip) + int(e or 0)
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * -n + digits
    else:
        x = n - 1
        s = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if x > 0 else "e-") + str(abs(x))
    return "-" + s if f < 0 else s


def _jcs(v: Any) -> str:
    """Full RFC 8785 for the rare payload that needs it (floats, or non-ASCII keys: UTF-16 key order)."""
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(_dumps(k) + ":" + _jcs(x) for k, x in items) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_jcs(x) for x in v) + "]"
    if type(v) is float:
        return _es_number(v)
    return _dumps(v)


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def _no_constant(name: str) -> float:
    raise Refused(f"{name} is not JSON")


class _Line:
    """json.loads hooks: note floats (they need the RFC 8785 number form), refuse NaN/Infinity."""

    floats = False

    @classmethod
    def parse_float(cls, s: str) -> float:
        cls.floats = True
        return float(s)


_loads = json.JSONDecoder(parse_float=_Line.parse_float, parse_constant=_no_constant).decode

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(store_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, source TEXT NOT NULL,"
    " transition_id TEXT NOT NULL, boot_id TEXT NOT NULL, source_ts TEXT, payload TEXT NOT NULL,"
    " payload_hash TEXT NOT NULL, UNIQUE(source, transition_id, boot_id))",
    "CREATE TABLE IF NOT EXISTS arrivals(id INTEGER PRIMARY KEY, line INTEGER, source TEXT,"
    " transition_id TEXT, boot_id TEXT, source_ts TEXT, arrival_at TEXT NOT NULL, receiver TEXT NOT NULL,"
    " payload_hash TEXT, decision TEXT NOT NULL, canonical_id INTEGER, reason TEXT, raw ANY NOT NULL)",
    "CREATE TABLE IF NOT EXISTS boots(device TEXT NOT NULL, boot_id TEXT NOT NULL, previous_boot_id TEXT,"
    " first_arrival TEXT NOT NULL, source_ts TEXT, arrival_id INTEGER NOT NULL, evidence TEXT NOT NULL,"
    " PRIMARY KEY(device, boot_id))",
)


def minimal_importer(db: str, file: str) -> None:
    """The baseline: the least work a correct importer must do (see the module docstring)."""
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    for ddl in _SCHEMA:
        con.execute(ddl)
    if con.execute("SELECT 1 FROM meta").fetchone() is None:
        con.execute("INSERT INTO meta VALUES (?)", (str(uuid.uuid4()),))
    # What the store already knows (contract section 3, "After the agent itself restarts").
    seen_boots: set[tuple[str, str]] = set()
    last_live: dict[str, str] = {}
    for device, boot in con.execute("SELECT device, boot_id FROM boots ORDER BY arrival_id"):
        seen_boots.add((device, boot))
        last_live[device] = boot
    state = {
        "event": con.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0],
        "arrival": con.execute("SELECT coalesce(max(id), 0) + 1 FROM arrivals").fetchone()[0],
    }
    receiver = "import:" + os.path.basename(file)
    with open(file, "rb") as f:
        batch: list[tuple[int, bytes]] = []
        for n, raw in enumerate(f, 1):
            if raw.isspace():
                continue  # contract section 5: blank lines are skipped
            batch.append((n, raw))
            if len(batch) == 1000:
                _minimal_batch(con, batch, state, seen_boots, last_live, receiver)
                batch = []
        if batch:
            _minimal_batch(con, batch, state, seen_boots, last_live, receiver)
    con.close()


def _minimal_batch(
    con: sqlite3.Connection,
    batch: list[tuple[int, bytes]],
    state: dict[str, int],
    seen_boots: set[tuple[str, str]],
    last_live: dict[str, str],
    receiver: str,
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    now_text = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    # (line, key or None, source_ts, arrival_at, payload text, hash, raw, reason)
    parsed: list[tuple[Any, ...]] = []
    for n, raw in batch:
        try:
            try:
                text = raw.decode()
            except UnicodeDecodeError:
                raise Refused("not UTF-8") from None
            _Line.floats = False
            try:
                obj = _loads(text)
            except ValueError as exc:
                raise Refused(f"not JSON: {exc}") from None
            if type(obj) is not dict:
                raise Refused("not a JSON object")
            payload = obj.get("payload", {})
            if type(payload) is not dict:
                raise Refused("payload must be a JSON object")
            src, tid, boot = _id(obj, "source"), _id(obj, "transitionId"), _id(obj, "bootId")
            ts = normal_ts(obj.get("sourceTimestamp"), "sourceTimestamp")
            at = normal_ts(obj.get("arrivalAt"), "arrivalAt") or now_text
            # json.dumps with sorted keys is RFC 8785 for text, integers, true/false/null and ASCII
            # keys; floats and non-ASCII (maybe escaped) text take the full path.
            slow = _Line.floats or not text.isascii() or "\\u" in text
            body = _jcs(payload) if slow else _dumps(payload)
            hashed = (
                f'{{"payload":{body},"sourceTimestamp":{"null" if ts is None else chr(34) + ts + chr(34)}}}'
            )
            try:
                h = hashlib.sha256(hashed.encode()).hexdigest()
                if "\\u" in text:  # an escaped lone surrogate is not Unicode text (ids included)
                    "".join(x or "" for x in (src, tid, boot)).encode()
            except UnicodeEncodeError:
                raise Refused("holds a lone UTF-16 surrogate") from None
        except Refused as exc:
            parsed.append((n, None, None, now_text, "", None, raw, str(exc)))
            continue
        if src and tid and boot:
            parsed.append((n, (src, tid, boot), ts, at, body, h, text, None))
        else:
            missing = "source" if not src else "transitionId" if not tid else "bootId"
            parsed.append((n, None, ts, at, body, h, text, f"missing {missing}; no identity is made up"))
    con.execute("BEGIN IMMEDIATE")
    keys = list({p[1] for p in parsed if p[1] is not None})
    known: dict[tuple[str, str, str], tuple[int, str]] = {}
    # One statement for the batch's keys, each looked up through the unique index; the write lock
    # is held from BEGIN IMMEDIATE, and a key that slipped past would fail the unique index, never merge.
    for cid, s_, t_, b_, hh in con.execute(
        "SELECT e.id, e.source, e.transition_id, e.boot_id, e.payload_hash FROM json_each(?) AS j"
        " CROSS JOIN events AS e ON e.source = j.value ->> 0 AND e.transition_id = j.value ->> 1"
        " AND e.boot_id = j.value ->> 2",
        (json.dumps(keys),),
    ):
        known[(s_, t_, b_)] = (cid, hh)
    new_events = []
    arrivals = []
    boots = []
    results = []
    aid = state["arrival"]
    for n, key, ts, at, body, h, text, reason in parsed:
        if key is None:
            decision = "rejected" if h is None else "identity_incomplete"
            arrivals.append((aid, n, None, None, None, ts, at, receiver, h, decision, None, reason, text))
            results.append(
                f'{{"line": {n}, "decision": "{decision}", "canonical_id": null, "duplicate_of": null,'
                f' "reason": {json.dumps(reason)}, "flags": []}}\n'
            )
            aid += 1
            continue
        device = key[0].split("/", 1)[0]
        if (device, key[2]) not in seen_boots:  # contract section 3: a new boot generation, live
            seen_boots.add((device, key[2]))
            prev = last_live.get(device)
            evidence = json.dumps({"previous_bootId": prev, "receiver": receiver, "line": n})
            boots.append((device, key[2], prev, at, ts, aid, evidence))
            last_live[device] = key[2]
        seen = known.get(key)
        if seen is None:
            cid = state["event"]
            state["event"] += 1
            known[key] = (cid, h)
            new_events.append((cid, *key, ts, body, h))
            decision, dup = "inserted", "null"
        else:
            cid = seen[0]
            decision, dup = ("duplicate" if seen[1] == h else "conflict"), str(cid)
        arrivals.append((aid, n, *key, ts, at, receiver, h, decision, cid, None, text))
        results.append(
            f'{{"line": {n}, "decision": "{decision}", "canonical_id": {cid}, "duplicate_of": {dup},'
            ' "reason": null, "flags": []}\n'
        )
        aid += 1
    state["arrival"] = aid
    con.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?)", new_events)
    con.executemany("INSERT INTO arrivals VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", arrivals)
    if boots:
        con.executemany("INSERT INTO boots VALUES (?,?,?,?,?,?,?)", boots)
    con.execute("COMMIT")
    sys.stdout.write("".join(results))
    sys.stdout.flush()


# --- the old, lean baseline (--minimal-lean) -------------------------------------------------


def lean_importer(db: str, file: str) -> None:
    """The old, lean baseline (`--minimal-lean`), kept as an extra figure: see the module docstring."""
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE events(id INTEGER PRIMARY KEY, source TEXT NOT NULL, transition_id TEXT NOT NULL,"
        " boot_id TEXT NOT NULL, source_ts TEXT, payload TEXT NOT NULL, payload_hash TEXT NOT NULL,"
        " UNIQUE(source, transition_id, boot_id))"
    )
    con.execute(
        "CREATE TABLE arrivals(id INTEGER PRIMARY KEY, line INTEGER, source TEXT, transition_id TEXT,"
        " boot_id TEXT, payload_hash TEXT, decision TEXT NOT NULL, canonical_id INTEGER, raw TEXT NOT NULL)"
    )
    next_id = 1
    out = sys.stdout
    with open(file, encoding="utf-8") as f:
        batch: list[tuple[int, str]] = []
        for n, text in enumerate(f, 1):
            batch.append((n, text))
            if len(batch) == 1000:
                next_id = _lean_batch(con, batch, next_id, out)
                batch = []
        if batch:
            _lean_batch(con, batch, next_id, out)
    con.close()


def _lean_batch(con: sqlite3.Connection, batch: list[tuple[int, str]], next_id: int, out: object) -> int:
    parsed = []
    for n, text in batch:
        obj = json.loads(text)
        key = (obj["source"], obj["transitionId"], obj["bootId"])
        if not all(isinstance(x, str) and x for x in key):
            raise SystemExit(f"line {n}: identity incomplete")
        ts = obj.get("sourceTimestamp")
        payload = json.dumps(obj["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text_hash = f'{{"payload":{payload},"sourceTimestamp":{json.dumps(ts)}}}'
        parsed.append((n, key, ts, payload, hashlib.sha256(text_hash.encode()).hexdigest(), text))
    con.execute("BEGIN IMMEDIATE")
    keys = list({p[1] for p in parsed})
    known: dict[tuple[str, str, str], tuple[int, str]] = {}
    # One statement for the batch's keys, each looked up through the unique index.
    for cid, src, tid, boot, h in con.execute(
        "SELECT e.id, e.source, e.transition_id, e.boot_id, e.payload_hash FROM json_each(?) AS j"
        " CROSS JOIN events AS e ON e.source = j.value ->> 0 AND e.transition_id = j.value ->> 1"
        " AND e.boot_id = j.value ->> 2",
        (json.dumps(keys),),
    ):
        known[(src, tid, boot)] = (cid, h)
    new_events = []
    arrivals = []
    results = []
    for n, key, ts, payload, h, text in parsed:
        seen = known.get(key)
        if seen is None:
            cid = next_id
            next_id += 1
            known[key] = (cid, h)
            new_events.append((cid, *key, ts, payload, h))
            decision = "inserted"
        else:
            cid = seen[0]
            decision = "duplicate" if seen[1] == h else "conflict"
        arrivals.append((n, *key, h, decision, cid, text))
        results.append(json.dumps({"line": n, "decision": decision, "canonical_id": cid}) + "\n")
    con.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?)", new_events)
    con.executemany(
        "INSERT INTO arrivals(line, source, transition_id, boot_id, payload_hash, decision, canonical_id, raw)"
        " VALUES (?,?,?,?,?,?,?,?)",
        arrivals,
    )
    con.execute("COMMIT")
    sys.stdout.write("".join(results))
    sys.stdout.flush()
    return next_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of agent and baseline")
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
    with tempfile.TemporaryDirectory() as tmp:
        small, large, edge = Path(tmp) / "small.jsonl", Path(tmp) / "large.jsonl", Path(tmp) / "edge.jsonl"
        write_file(small, n)
        write_file(large, 3 * n)
        edge.write_text("\n".join(EDGE_LINES) + "\n")
        runs = iter(range(10_000))
        rss: list[int] = []
        lean_rates: list[float] = []

        def agent() -> float:
            seconds, peak = timed_process(agent_cmd(Path(tmp) / f"a{next(runs)}.db", small), "agent")
            rss.append(peak)
            return n / seconds

        def baseline() -> float:
            # The old, lean baseline runs next to the new one, in alternating order, as an extra figure.
            r = next(runs)
            lean_first = r % 2 == 1
            if lean_first:
                lean_rates.append(n / timed_process(minimal_cmd(Path(tmp) / f"l{r}.db", small, lean=True))[0])
            rate = n / timed_process(minimal_cmd(Path(tmp) / f"b{r}.db", small), "baseline")[0]
            if not lean_first:
                lean_rates.append(n / timed_process(minimal_cmd(Path(tmp) / f"l{r}.db", small, lean=True))[0])
            return rate

        agent_rates, base_rates = alternate(args.rounds, agent, baseline)
        _, rss_large = timed_process(agent_cmd(Path(tmp) / "large.db", large))
        # Untimed, and after every measured process: the baseline must decide every line as the
        # agent does, or its rate means nothing. (After: a child's ru_maxrss counts the RSS of
        # this process at the fork, and the check holds every result line.)
        checked = check_same_decisions(Path(tmp), small, "bench file")
        check_same_decisions(Path(tmp), edge, "edge lines", hashes=True)
    rss_small = max(rss)
    print(
        json.dumps(
            {
                "bench": "import_file",
                "lines": n,
                "rounds": args.rounds,
                "import_lines_per_s": round(median(agent_rates)),
                "baseline_minimal_importer_lines_per_s": round(median(base_rates)),
                "ratio_vs_baseline": ratio(agent_rates, base_rates),
                "baseline_lean_lines_per_s": round(median(lean_rates)),
                "ratio_vs_lean_baseline": ratio(agent_rates, lean_rates),
                "decisions_checked": checked,
                # CPU per line of all the process's work (the agent's on two cores: its parsing
                # process is counted), medians
                "agent_cpu_us_per_line": round(median(CPU_S["agent"]) / n * 1e6, 1),
                "baseline_cpu_us_per_line": round(median(CPU_S["baseline"]) / n * 1e6, 1),
                "agent_rounds": [round(x) for x in agent_rates],
                "baseline_rounds": [round(x) for x in base_rates],
                "baseline_lean_rounds": [round(x) for x in lean_rates],
                "peak_rss_kib_lines": rss_small,
                "peak_rss_kib_3x_lines": rss_large,
                "rss_growth_3x": round(rss_large / rss_small, 3),
            }
        )
    )


if __name__ == "__main__":
    main()

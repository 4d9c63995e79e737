"""The import bench's baselines, each run as its own process by bench/import_file.py.

* `--minimal DB FILE`: a minimal correct importer (what it does per line: bench/import_file.py's
  docstring);
* `--minimal-lean DB FILE`: the old, lean baseline (not a correct importer; kept as an extra figure).

Plain stdlib, written apart from the agent's code.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
import sqlite3
import sys
import uuid
from typing import Any

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


def parse_line(n: int, raw: bytes, now: str, *, raw_evidence: bool = False) -> tuple[Any, ...]:
    """(line, key or None, source_ts, arrival_at, payload text, hash, evidence, reason) of one line, read
    as a user's import must (contract section 1). The evidence is the line's text, or its bytes
    (refused lines always, every line with `raw_evidence`)."""
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
        at = normal_ts(obj.get("arrivalAt"), "arrivalAt") or now
        # json.dumps with sorted keys is RFC 8785 for text, integers, true/false/null and ASCII
        # keys; floats and non-ASCII (maybe escaped) text take the full path.
        slow = _Line.floats or not text.isascii() or "\\u" in text
        body = _jcs(payload) if slow else _dumps(payload)
        hashed = f'{{"payload":{body},"sourceTimestamp":{"null" if ts is None else chr(34) + ts + chr(34)}}}'
        try:
            h = hashlib.sha256(hashed.encode()).hexdigest()
            if "\\u" in text:  # an escaped lone surrogate is not Unicode text (ids included)
                "".join(x or "" for x in (src, tid, boot)).encode()
        except UnicodeEncodeError:
            raise Refused("holds a lone UTF-16 surrogate") from None
    except Refused as exc:
        return (n, None, None, now, "", None, raw, str(exc))
    evidence = raw if raw_evidence else text
    if src and tid and boot:
        return (n, (src, tid, boot), ts, at, body, h, evidence, None)
    missing = "source" if not src else "transitionId" if not tid else "bootId"
    return (n, None, ts, at, body, h, evidence, f"missing {missing}; no identity is made up")


def keyless_result(n: int, h: str | None, reason: str) -> tuple[str, str]:
    """A line without a complete key: its decision (`rejected` when it did not parse, else
    `identity_incomplete`) and its result line."""
    decision = "rejected" if h is None else "identity_incomplete"
    return decision, (
        f'{{"line": {n}, "decision": "{decision}", "canonical_id": null, "duplicate_of": null,'
        f' "reason": {json.dumps(reason)}, "flags": []}}\n'
    )


def keyed_result(n: int, decision: str, cid: int, dup: str) -> str:
    """The result line of a decided delivery (`dup`: the canonical id as text, or null)."""
    return (
        f'{{"line": {n}, "decision": "{decision}", "canonical_id": {cid}, "duplicate_of": {dup},'
        ' "reason": null, "flags": []}\n'
    )


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
    parsed = [parse_line(n, raw, now_text) for n, raw in batch]
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
            decision, result = keyless_result(n, h, reason)
            arrivals.append((aid, n, None, None, None, ts, at, receiver, h, decision, None, reason, text))
            results.append(result)
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
        results.append(keyed_result(n, decision, cid, dup))
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
    mode, db, file = sys.argv[1:4]
    if mode == "--minimal":
        minimal_importer(db, file)
    elif mode == "--minimal-lean":
        lean_importer(db, file)
    else:
        raise SystemExit(f"usage: {sys.argv[0]} --minimal|--minimal-lean DB FILE")


if __name__ == "__main__":
    main()

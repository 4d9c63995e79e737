"""A lean set-based arbiter for the ledger bench, written apart from the ledger's code (its own process).

    python bench/ledger_lean.py DSN FILE     # one JSON result line per input line, after commit

What it does per batch of 1,000 lines, in one transaction (fsync and synchronous commit are the
server's, on):

* parse each line as a user's import must (bench/import_baseline.py's checks: UTF-8, JSON without
  NaN, ids as text, RFC 3339 timestamps to UTC milliseconds, RFC 8785 of the payload and the
  SHA-256 of payload and sourceTimestamp); a line that fails is a `rejected` arrival, a line
  without a complete key an `identity_incomplete` one;
* `COPY` the batch's complete deliveries into a temporary stage table;
* `INSERT INTO lean_canonical SELECT DISTINCT ON (key) ... FROM stage ORDER BY key, seq ON
  CONFLICT DO NOTHING RETURNING` the keys it inserted (the first delivery of each key wins);
* read the winners of every key of the batch (one join of the stage with the canonical table);
* decide each line: the first delivery of a key this batch inserted is `inserted`, every other
  one `duplicate` (same hash) or `conflict`;
* `COPY` every arrival (its decision, canonical id, key, timestamps, hash, gateway, raw line) into
  `lean_arrival` (indexed by canonical id, as the ledger's counts are read from the arrivals);
* the batch's (device, bootId) pairs `INSERT ... ON CONFLICT DO NOTHING` into `lean_boot`;
* COMMIT, then print the result lines (`line`, `decision`, `canonical_id`, `duplicate_of`,
  `reason`, `flags`) as `edge-agent ledger import --json` does.

It keeps no conflict table, no pending list, no device state and no notifications: the least a
set-based arbiter writes to decide every delivery and keep every arrival.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench.import_baseline import keyed_result, keyless_result, parse_line

BATCH = 1000

SCHEMA = """
CREATE TABLE IF NOT EXISTS lean_canonical (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source text NOT NULL, transition_id text NOT NULL, boot_id text NOT NULL,
    source_ts timestamptz, payload text NOT NULL, payload_hash text NOT NULL,
    inserted_arrival_at timestamptz NOT NULL, first_gateway text NOT NULL,
    UNIQUE (source, transition_id, boot_id));
CREATE TABLE IF NOT EXISTS lean_arrival (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, decision text NOT NULL, canonical_id bigint,
    source text, transition_id text, boot_id text, source_ts timestamptz, payload_hash text,
    reason text, gateway text NOT NULL, gateway_arrival_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL, line integer, raw bytea NOT NULL);
CREATE INDEX IF NOT EXISTS lean_arrival_canonical ON lean_arrival (canonical_id);
CREATE TABLE IF NOT EXISTS lean_boot (device text NOT NULL, boot_id text NOT NULL,
    first_arrival timestamptz NOT NULL, PRIMARY KEY (device, boot_id));
"""
STAGE = (
    "CREATE TEMP TABLE stage (seq int, source text, transition_id text, boot_id text, source_ts timestamptz,"
    " payload text, payload_hash text, arrival_at timestamptz) ON COMMIT DELETE ROWS"
)
INSERT_CANONICAL = """
INSERT INTO lean_canonical (source, transition_id, boot_id, source_ts, payload, payload_hash,
                            inserted_arrival_at, first_gateway)
SELECT DISTINCT ON (source, transition_id, boot_id) source, transition_id, boot_id, source_ts, payload,
       payload_hash, arrival_at, %s
FROM stage ORDER BY source, transition_id, boot_id, seq
ON CONFLICT (source, transition_id, boot_id) DO NOTHING
RETURNING source, transition_id, boot_id
"""
WINNERS = """
SELECT c.source, c.transition_id, c.boot_id, c.id, c.payload_hash
FROM (SELECT DISTINCT source, transition_id, boot_id FROM stage) k
JOIN lean_canonical c USING (source, transition_id, boot_id)
"""
BOOTS = """
INSERT INTO lean_boot (device, boot_id, first_arrival)
SELECT DISTINCT ON (d, boot_id) split_part(source, '/', 1) AS d, boot_id, arrival_at FROM stage
ORDER BY d, boot_id, seq
ON CONFLICT DO NOTHING
"""
COPY_STAGE = "COPY stage (seq, source, transition_id, boot_id, source_ts, payload, payload_hash, arrival_at) FROM STDIN"
COPY_ARRIVALS = (
    "COPY lean_arrival (decision, canonical_id, source, transition_id, boot_id, source_ts, payload_hash,"
    " reason, gateway, gateway_arrival_at, received_at, line, raw) FROM STDIN"
)


def arbitrate(cur: psycopg.Cursor[Any], batch: list[tuple[int, bytes]], gateway: str) -> str:
    """One batch in the open transaction; returns its result lines."""
    now_dt = datetime.now(UTC)
    now = now_dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now_dt.microsecond // 1000:03d}Z"
    parsed = [parse_line(n, raw, now, raw_evidence=True) for n, raw in batch]
    with cur.copy(COPY_STAGE) as cp:
        for seq, p in enumerate(parsed):
            if p[1] is not None:
                cp.write_row((seq, *p[1], p[2], p[4], p[5], p[3]))
    cur.execute(INSERT_CANONICAL, (gateway,))
    fresh = {tuple(r) for r in cur.fetchall()}
    cur.execute(WINNERS)
    winners = {(r[0], r[1], r[2]): (r[3], r[4]) for r in cur.fetchall()}
    cur.execute(BOOTS)
    out = []
    with cur.copy(COPY_ARRIVALS) as cp:
        for n, key, ts, at, _body, h, raw, reason in parsed:
            if key is None:
                decision, result = keyless_result(n, h, reason)
                cp.write_row((decision, None, None, None, None, ts, h, reason, gateway, at, now, n, raw))
                out.append(result)
                continue
            cid, won = winners[key]
            if key in fresh:
                fresh.discard(key)
                decision, dup = "inserted", "null"
            else:
                decision, dup = ("duplicate" if won == h else "conflict"), str(cid)
            cp.write_row((decision, cid, *key, ts, h, None, gateway, at, now, n, raw))
            out.append(keyed_result(n, decision, cid, dup))
    return "".join(out)


def main() -> None:
    dsn, file = sys.argv[1:3]
    gateway = "import"
    with psycopg.connect(dsn) as conn:
        conn.execute(SCHEMA)
        conn.execute(STAGE)
        conn.commit()
        with open(file, "rb") as f, conn.cursor() as cur:
            batch: list[tuple[int, bytes]] = []
            for n, raw in enumerate(f, 1):
                if raw.isspace():
                    continue
                batch.append((n, raw))
                if len(batch) == BATCH:
                    results = arbitrate(cur, batch, gateway)
                    conn.commit()
                    sys.stdout.write(results)
                    batch = []
            if batch:
                results = arbitrate(cur, batch, gateway)
                conn.commit()
                sys.stdout.write(results)
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""The batch arbitration: one transaction per batch, decided by `agent.core.decide`.

Steps, each a set-based statement over the whole batch (never one statement per delivery):

1. Read the canonical rows the batch's keys already have (the common case of a re-delivery
   then writes nothing to the unique index).
2. `INSERT ... SELECT FROM unnest(...) ORDER BY key ON CONFLICT DO NOTHING RETURNING`: the first
   delivery of every other key, sorted by key (COLLATE "C") so that two arbiters take the
   unique index's locks in one order and never deadlock. A key another arbiter holds
   uncommitted makes this statement wait; an expected conflict never aborts the transaction.
3. For a key that lost that race, a NEW statement reads the winner's row: under READ COMMITTED
   it sees a row committed while step 2 waited (one statement doing both cannot).
4. `decide.classify` (pure, the same rules as the SQLite store) decides every delivery.
5. Every arrival is written (COPY) with its own id and evidence; conflicting content goes to
   `conflict`; new boots, device state and the pending list follow. A canonical row is written
   once and never updated: its counts, span and status are read from its arrivals.

Any error other than an expected conflict rolls the whole batch back; a deadlock or
serialization failure (not expected, but cheap to survive) retries the batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from agent.core import decide
from agent.core.contract import Decision, Delivery, Key, Rejection
from agent.ledger import arrival_keys, arrival_rows, failover, notifications, records
from agent.ledger.arrivals import Arrival, Received
from agent.ledger.config import NotifyRule
from agent.ledger.errors import LedgerError, LedgerUnavailable
from agent.ledger.storable import storable

log = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

RETRIES = 5

INSERT_CANONICAL = """
INSERT INTO canonical_event (id, source, transition_id, boot_id, source_ts, payload, payload_hash,
                             inserted_arrival_at, first_gateway)
OVERRIDING SYSTEM VALUE
SELECT i, s, t, b, ts, p, h, a, g
FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[]::timestamptz[], %b::text[],
            %b::text[], %b::text[]::timestamptz[], %b::text[]) AS k(i, s, t, b, ts, p, h, a, g)
ORDER BY s COLLATE "C", t COLLATE "C", b COLLATE "C"
ON CONFLICT ON CONSTRAINT canonical_event_key DO NOTHING
RETURNING source, transition_id, boot_id, id, payload_hash
"""

# The sequence is looked up once per statement (a materialized CTE): `pg_get_serial_sequence`
# in the select list was evaluated for every row drawn (its pg_depend scan cost more than nextval).
CANONICAL_IDS = """
WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('canonical_event', 'id')::regclass AS seq)
SELECT nextval(s.seq) FROM s, generate_series(1, %s)
"""

READ_CANONICAL = """
SELECT c.source, c.transition_id, c.boot_id, c.id, c.payload_hash
FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(s, t, b)
JOIN canonical_event c ON c.source = k.s AND c.transition_id = k.t AND c.boot_id = k.b
"""

ARRIVAL_IDS = """
WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('arrival', 'id')::regclass AS seq)
SELECT nextval(s.seq) FROM s, generate_series(1, %s)
"""

INSERT_CONFLICTS = """
INSERT INTO conflict (arrival_id, canonical_id, payload, payload_hash, source_ts)
SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[]::timestamptz[])
ON CONFLICT (arrival_id) DO NOTHING
"""

INSERT_PENDING = "INSERT INTO pending (arrival_id) SELECT unnest(%b::bigint[]) ON CONFLICT DO NOTHING"


async def record(
    conn: Conn,
    batch: Sequence[Arrival],
    *,
    now: datetime | None = None,
    rules: Sequence[NotifyRule] = (),
    horizon_s: float | None = None,
    keys_s: float | None = None,
) -> list[decide.Outcome]:
    """Decide and commit one batch; returns one Outcome per arrival, in order.

    With `horizon_s` (the identity horizon), a key with no identity whose event time is older
    than `now - horizon_s` is `beyond_horizon` (no canonical, on the pending list). With `keys_s`
    (the arrivals' retention period), arrival keys are looked up among the arrivals received since
    `now - keys_s` only (`arrival_keys.recorded`).
    Returns only after COMMIT: an outcome is a promise that survives a crash of the ledger.
    Raises LedgerUnavailable when PostgreSQL cannot be reached (nothing of the batch kept).
    """
    if not batch:
        return []
    batch = [storable(a) for a in batch]
    for attempt in range(1, RETRIES + 1):
        try:
            async with conn.transaction():
                return await decide_batch(conn, batch, now or datetime.now(UTC), rules, horizon_s, keys_s)
        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
            log.warning("batch retried after %s attempt=%d", type(exc).__name__, attempt)
            await asyncio.sleep(0.01 * attempt)
        except pg_errors.UniqueViolation as exc:
            if not arrival_keys.is_key_violation(exc.diag.constraint_name):
                raise
            # The key's first arrival may be older than the window, in the same partition: the
            # retry reads every partition and finds it (its stored decision, no second arrival).
            keys_s = None
            # another instance committed an arrival of this batch meanwhile: the retry finds it
            log.info(
                "batch retried: another ledger instance recorded one of its arrivals attempt=%d", attempt
            )
        except psycopg.Error as exc:
            if not failover.unavailable(exc):
                raise
            raise LedgerUnavailable(f"PostgreSQL: {exc}".strip()) from exc
    raise LedgerError(f"a batch of {len(batch)} failed {RETRIES} times (deadlock, serialization, race)")


async def decide_batch(
    conn: Conn,
    batch: Sequence[Arrival],
    now: datetime,
    rules: Sequence[NotifyRule] = (),
    horizon_s: float | None = None,
    keys_s: float | None = None,
) -> list[decide.Outcome]:
    """The steps of one batch, inside the caller's transaction. An arrival whose key is recorded
    already (a re-run after an unknown COMMIT outcome) gets its stored outcome and writes nothing;
    a repeat of a key inside the batch gets its first's outcome."""
    keys = [(arrival_keys.source_of(a), arrival_keys.key_of(a)) for a in batch]
    firsts, repeats = arrival_keys.split(keys)
    since = now - timedelta(seconds=keys_s) if keys_s else None
    known = await arrival_keys.recorded(conn, keys, firsts, since)
    new = [i for i in firsts if i not in known]
    cutoff = decide.horizon_cutoff(now, horizon_s) if horizon_s else None
    if len(new) == len(batch):
        return await _decide_new(conn, batch, [k for _, k in keys], now, rules, cutoff)
    outcomes: dict[int, decide.Outcome] = dict(known)
    decided = await _decide_new(conn, [batch[i] for i in new], [keys[i][1] for i in new], now, rules, cutoff)
    outcomes.update(zip(new, decided, strict=True))
    for i, first in repeats.items():
        outcomes[i] = outcomes[first]
    return [outcomes[i] for i in range(len(batch))]


async def _decide_new(
    conn: Conn,
    batch: Sequence[Arrival],
    keys: list[bytes],
    now: datetime,
    rules: Sequence[NotifyRule],
    cutoff: datetime | None,
) -> list[decide.Outcome]:
    if not batch:
        return []
    items = [a.item for a in batch]
    ids = await _arrival_ids(conn, len(batch))
    where = [i for i, it in enumerate(items) if not isinstance(it, Received)]
    deliveries: list[Delivery | Rejection] = [it for it in items if not isinstance(it, Received)]
    outcomes: list[decide.Outcome | None] = [None] * len(batch)
    decided = await _decide_deliveries(conn, batch, deliveries, ids, where, cutoff)
    for i, oc in zip(where, decided, strict=True):
        outcomes[i] = oc
    for i, oc in (await records.record(conn, batch, ids)).items():
        outcomes[i] = oc
    done = [oc for oc in outcomes if oc is not None]
    assert len(done) == len(batch)
    await arrival_rows.copy(conn, batch, done, ids, keys, now)
    if rules:
        await notifications.queue(conn, batch, done, rules)
    return done


async def _decide_deliveries(
    conn: Conn,
    batch: Sequence[Arrival],
    items: list[Delivery | Rejection],
    all_ids: list[int],
    where: list[int],
    cutoff: datetime | None = None,
) -> list[decide.Outcome]:
    """Transitions (and rejections): canonical rows, the decision, counts, conflicts, boots, pending."""
    if not items:
        return []
    ids = [all_ids[i] for i in where]
    firsts = {key: where[i] for key, i in _firsts(items).items()}
    canonical, created, beyond = await _canonicals(conn, batch, firsts, cutoff)
    # The counts of later arrivals (`updates`) are not written: the report reads them from the
    # arrivals, so a duplicate never rewrites (or locks) its canonical row.
    outcomes, _ = decide.classify(items, canonical, 0, created=created.keys(), beyond=beyond)
    await _insert_conflicts(conn, items, outcomes, ids)
    # A device's boots are derived from the key only for import lines (`source` = device/channel);
    # a gateway sends its BootObserved records itself, and a CloudEvents source names the site.
    sightings = [
        s for s in decide.sightings_of(items) if s.index is None or batch[where[s.index]].via == "import"
    ]
    await record_boots(conn, sightings, ids)
    pending = [i for i, oc in zip(ids, outcomes, strict=True) if oc.decision in FOR_A_PERSON]
    if pending:
        await conn.execute(INSERT_PENDING, (pending,))
    return outcomes


FOR_A_PERSON = (Decision.IDENTITY_INCOMPLETE, Decision.BEYOND_HORIZON)  # kept on the pending list


async def _canonicals(
    conn: Conn, batch: Sequence[Arrival], firsts: dict[Key, int], cutoff: datetime | None
) -> tuple[dict[Key, tuple[int, str]], dict[Key, tuple[int, str]], set[Key]]:
    """The canonical row of every key (read, or inserted for a new key), the keys this batch
    created, and the keys beyond the identity horizon (no identity, event time before `cutoff`:
    no row inserted for them)."""
    canonical = await _read_canonicals(conn, list(firsts))
    unknown = {k: i for k, i in firsts.items() if k not in canonical}
    beyond: set[Key] = set()
    if cutoff is not None:
        for k, i in unknown.items():
            d = batch[i].item
            if isinstance(d, Delivery) and decide.beyond_horizon(d, cutoff):
                beyond.add(k)
    created = await _insert_canonicals(conn, batch, {k: i for k, i in unknown.items() if k not in beyond})
    canonical.update(created)
    if len(canonical) + len(beyond) < len(firsts):  # another arbiter committed some new keys meanwhile
        canonical.update(
            await _read_canonicals(conn, [k for k in firsts if k not in canonical and k not in beyond])
        )
    if len(canonical) + len(beyond) != len(firsts):  # an identity pruned at its horizon meanwhile
        raise LedgerError(f"canonical rows missing for {len(firsts) - len(canonical)} keys after the insert")
    return canonical, created, beyond


def _firsts(items: Sequence[Delivery | Rejection]) -> dict[Key, int]:
    """The position of the first complete delivery of every key."""
    firsts: dict[Key, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Delivery) and item.key is not None and item.key not in firsts:
            firsts[item.key] = i
    return firsts


async def _insert_canonicals(
    conn: Conn, batch: Sequence[Arrival], new: dict[Key, int]
) -> dict[Key, tuple[int, str]]:
    """Insert the keys not seen before; returns those this statement created.

    Ids are drawn in batch order (so a single writer numbers events as the SQLite store does);
    the rows go in in key order (the lock order). A key another arbiter inserted first is
    skipped by ON CONFLICT and its drawn id is never used.
    """
    if not new:
        return {}
    cur = await conn.execute(CANONICAL_IDS, (len(new),))
    ids = sorted(int(r[0]) for r in await cur.fetchall())
    cols: list[list[Any]] = [[] for _ in range(9)]
    for cid, (key, i) in zip(ids, new.items(), strict=True):
        d = batch[i].item
        assert isinstance(d, Delivery)
        row = (
            cid,
            key.source,
            key.transition_id,
            key.boot_id,
            d.source_timestamp,
            d.payload_json,
            d.payload_hash,
            d.arrival_at,
            batch[i].gateway,
        )
        for col, value in zip(cols, row, strict=True):
            col.append(value)
    cur = await conn.execute(INSERT_CANONICAL, cols)
    return {Key(r[0], r[1], r[2]): (int(r[3]), str(r[4])) for r in await cur.fetchall()}


async def _read_canonicals(conn: Conn, keys: list[Key]) -> dict[Key, tuple[int, str]]:
    if not keys:
        return {}
    cur = await conn.execute(
        READ_CANONICAL,
        ([k.source for k in keys], [k.transition_id for k in keys], [k.boot_id for k in keys]),
    )
    return {Key(r[0], r[1], r[2]): (int(r[3]), str(r[4])) for r in await cur.fetchall()}


async def _arrival_ids(conn: Conn, n: int) -> list[int]:
    cur = await conn.execute(ARRIVAL_IDS, (n,))
    return sorted(int(r[0]) for r in await cur.fetchall())


async def _insert_conflicts(
    conn: Conn, items: Sequence[Delivery | Rejection], outcomes: list[decide.Outcome], ids: list[int]
) -> None:
    rows = [
        (aid, oc.canonical_id, it.payload_json, it.payload_hash, it.source_timestamp)
        for aid, it, oc in zip(ids, items, outcomes, strict=True)
        if oc.decision is Decision.CONFLICT and isinstance(it, Delivery)
    ]
    if rows:
        await conn.execute(INSERT_CONFLICTS, [list(col) for col in zip(*rows, strict=True)])


KNOWN_BOOTS = (
    "SELECT b.device, b.boot_id FROM unnest(%b::text[], %b::text[]) AS p(d, b)"
    " JOIN boot b ON b.device = p.d AND b.boot_id = p.b"
)


async def record_boots(conn: Conn, sightings: list[decide.BootSighting], arrival_ids: list[int]) -> None:
    """BootObserved rows for boots not seen before (`decide.new_boots`), and each device's latest live boot.

    The boots the sightings name are read first: a boot once recorded is never removed, and
    `decide.new_boots` makes nothing of a known one, so a batch whose boots are all known (the
    common case) locks and writes nothing. The state rows of the devices with a boot not known
    are then locked (in device order), so two arbiters seeing one new boot agree on its
    previous_bootId, and those boots are read again under the lock (another arbiter may have
    committed one meanwhile); the boot insert is arbitrated by its unique key.
    """
    if not sightings:
        return
    pairs = list(dict.fromkeys((s.device, s.boot_id) for s in sightings))
    cur = await conn.execute(KNOWN_BOOTS, ([d for d, _ in pairs], [b for _, b in pairs]))
    known = {(r[0], r[1]) for r in await cur.fetchall()}
    unknown = [p for p in pairs if p not in known]
    if not unknown:
        return
    devices = sorted({d for d, _ in unknown})
    cur = await conn.execute(
        "SELECT device, last_live_boot FROM device_state WHERE device = ANY(%b::text[])"
        ' ORDER BY device COLLATE "C" FOR UPDATE',
        (devices,),
    )
    last_live: dict[str, str | None] = {r[0]: r[1] for r in await cur.fetchall()}
    cur = await conn.execute(KNOWN_BOOTS, ([d for d, _ in unknown], [b for _, b in unknown]))
    known.update((r[0], r[1]) for r in await cur.fetchall())
    records, changed = decide.new_boots(sightings, known, last_live)
    if not records:
        return
    index_of = {(s.device, s.boot_id): s.index for s in reversed(sightings)}
    records.sort(key=lambda r: (r.device.encode(), r.boot_id.encode()))
    await conn.execute(
        "INSERT INTO boot (device, boot_id, previous_boot_id, first_arrival, source_ts, live, evidence,"
        " arrival_id) SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]::timestamptz[],"
        " %b::text[]::timestamptz[], %b::bool[], %b::text[], %b::bigint[])"
        " ON CONFLICT ON CONSTRAINT boot_key DO NOTHING",
        (
            [r.device for r in records],
            [r.boot_id for r in records],
            [r.previous_boot_id for r in records],
            [r.first_arrival for r in records],
            [r.source_ts for r in records],
            [r.live for r in records],
            [r.evidence_json for r in records],
            [_arrival_of(index_of.get((r.device, r.boot_id)), arrival_ids) for r in records],
        ),
    )
    if changed:
        ordered = sorted(changed.items(), key=lambda kv: kv[0].encode())
        await conn.execute(
            "INSERT INTO device_state (device, last_live_boot) SELECT * FROM unnest(%b::text[], %b::text[])"
            " ON CONFLICT (device) DO UPDATE SET last_live_boot = excluded.last_live_boot",
            ([d for d, _ in ordered], [b for _, b in ordered]),
        )


def _arrival_of(index: int | None, arrival_ids: list[int]) -> int | None:
    return arrival_ids[index] if index is not None else None

"""Schema of the event store as numbered migrations under `PRAGMA user_version`.

Each migration runs inside its own `BEGIN IMMEDIATE ... COMMIT` (statement by statement:
Python 3.11's `executescript()` would commit a pending transaction first), so a failing
migration leaves the store at the previous version.

What each table holds: docs/architecture.md, "The store's tables". `events.identity_basis` and
`arrivals.identity_basis` say where the transitionId came from: `counter`, `event_id` or
`window` (agent/core/basis.py).
"""

from __future__ import annotations

from collections.abc import Sequence

Migration = tuple[int, str, Sequence[str]]

MIGRATIONS: list[Migration] = [
    (
        1,
        "arrival log, canonical events, boots, anomalies, pending, outbox",
        [
            """CREATE TABLE arrivals(
                arrival_id INTEGER PRIMARY KEY AUTOINCREMENT,
                source TEXT, transition_id TEXT, boot_id TEXT,
                source_ts TEXT,
                arrival_at TEXT NOT NULL,
                receiver TEXT NOT NULL,
                payload_hash TEXT,
                decision TEXT NOT NULL CHECK (decision IN
                    ('inserted','duplicate','conflict','identity_incomplete','rejected')),
                canonical_id INTEGER,
                reason TEXT,
                flags TEXT NOT NULL DEFAULT '',
                line INTEGER,
                live INTEGER NOT NULL DEFAULT 1,
                raw ANY NOT NULL
            ) STRICT""",
            "CREATE INDEX arrivals_by_canonical ON arrivals(canonical_id)",
            """CREATE TABLE events(
                canonical_id INTEGER PRIMARY KEY AUTOINCREMENT,
                source TEXT NOT NULL, transition_id TEXT NOT NULL, boot_id TEXT NOT NULL,
                device TEXT NOT NULL,
                source_ts TEXT,
                payload TEXT NOT NULL,
                payload_hash TEXT NOT NULL,
                status TEXT NOT NULL DEFAULT 'Canonical' CHECK (status IN ('Canonical','DuplicateConflict')),
                duplicate_count INTEGER NOT NULL DEFAULT 0,
                conflict_count INTEGER NOT NULL DEFAULT 0,
                first_arrival TEXT NOT NULL,
                last_arrival TEXT NOT NULL,
                first_arrival_id INTEGER NOT NULL
            ) STRICT""",
            "CREATE UNIQUE INDEX events_key ON events(source, transition_id, boot_id)",
            """CREATE TABLE boots(
                boot_row INTEGER PRIMARY KEY AUTOINCREMENT,
                device TEXT NOT NULL,
                boot_id TEXT NOT NULL,
                previous_boot_id TEXT,
                first_arrival TEXT NOT NULL,
                source_ts TEXT,
                live INTEGER NOT NULL,
                arrival_id INTEGER,
                evidence TEXT NOT NULL,
                UNIQUE(device, boot_id)
            ) STRICT""",
            """CREATE TABLE device_state(
                device TEXT PRIMARY KEY,
                last_live_boot TEXT
            ) STRICT""",
            """CREATE TABLE anomalies(
                anomaly_id INTEGER PRIMARY KEY AUTOINCREMENT,
                source TEXT NOT NULL,
                boot_id TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('gap','wrap','reset','overrun')),
                from_value TEXT NOT NULL,
                to_value TEXT NOT NULL,
                detected_at TEXT NOT NULL,
                evidence TEXT NOT NULL DEFAULT '{}',
                UNIQUE(source, boot_id, kind, from_value, to_value)
            ) STRICT""",
            """CREATE TABLE pending(
                arrival_id INTEGER PRIMARY KEY,
                state TEXT NOT NULL DEFAULT 'open',
                note TEXT
            ) STRICT""",
            """CREATE TABLE upstreams(
                name TEXT PRIMARY KEY,
                backfill TEXT NOT NULL DEFAULT 'none',
                added_at TEXT NOT NULL
            ) STRICT""",
            """CREATE TABLE outbox(
                outbox_id INTEGER PRIMARY KEY AUTOINCREMENT,
                upstream TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN
                    ('transition','boot_observed','gap','anomaly','identity_incomplete')),
                ref_id INTEGER NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','rejected')),
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                created_at TEXT NOT NULL,
                sent_at TEXT,
                UNIQUE(upstream, kind, ref_id)
            ) STRICT""",
            "CREATE INDEX outbox_pending ON outbox(upstream, state, outbox_id)",
        ],
    ),
]

# Retention. Kept as its own list entry so that it stays the last migration: see
# agent/core/retention.py for what these tables mean.
RETENTION_MIGRATION: Migration = (
    2,
    "retention: compact key records, forgotten-key watermarks, retention counters",
    [
        # What stays of a canonical event once its payload is pruned: enough to keep deciding
        # duplicate / conflict for its key. canonical_id is the rowid (no extra index); the
        # hash is stored as 32 bytes instead of 64 hex characters.
        """CREATE TABLE event_keys(
            canonical_id INTEGER PRIMARY KEY,
            source TEXT NOT NULL, transition_id TEXT NOT NULL, boot_id TEXT NOT NULL,
            payload_hash BLOB NOT NULL,
            first_arrival TEXT NOT NULL,
            last_arrival TEXT NOT NULL,
            conflict_count INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE UNIQUE INDEX event_keys_key ON event_keys(source, transition_id, boot_id)",
        # Per (source, bootId): how many keys were forgotten at the key horizon and the latest
        # arrival among them. A new key of that pair whose sourceTimestamp is not after it (or
        # has none) may be a forgotten one: it is flagged `key_horizon_passed`.
        """CREATE TABLE forgotten_keys(
            source TEXT NOT NULL, boot_id TEXT NOT NULL,
            keys INTEGER NOT NULL,
            through_arrival TEXT NOT NULL,
            PRIMARY KEY(source, boot_id)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE retention_counts(
            name TEXT PRIMARY KEY,
            value INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
    ],
)
MIGRATIONS.append(RETENTION_MIGRATION)


LIVE_STATE_MIGRATION: Migration = (
    3,
    "live state of the running service, for `edge-agent status`",
    [
        """CREATE TABLE live_state(
            name TEXT PRIMARY KEY,
            updated_at TEXT NOT NULL,
            state TEXT NOT NULL
        ) STRICT""",
    ],
)
MIGRATIONS.append(LIVE_STATE_MIGRATION)


IDENTITY_BASIS_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "identity basis of events and arrivals: counter, event_id or window (contract sections 7, 8)",
    [
        # Existing rows were all keyed by an id the source gave: `counter`.
        "ALTER TABLE events ADD COLUMN identity_basis TEXT NOT NULL DEFAULT 'counter'"
        " CHECK (identity_basis IN ('counter','event_id','window'))",
        # NULL for a rejected arrival (nothing was parsed, so no basis is known).
        "ALTER TABLE arrivals ADD COLUMN identity_basis TEXT"
        " CHECK (identity_basis IN ('counter','event_id','window'))",
    ],
)
MIGRATIONS.append(IDENTITY_BASIS_MIGRATION)


REVIEW_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "review marks: an operator's note that a conflict or an identity-incomplete arrival was reviewed",
    [
        # Append-only: a later mark of the same arrival adds a row; nothing is updated or deleted,
        # and the arrival, its canonical event and the pending list stay as they are.
        """CREATE TABLE review_marks(
            mark_id INTEGER PRIMARY KEY AUTOINCREMENT,
            arrival_id INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('conflict','identity_incomplete')),
            note TEXT NOT NULL,
            marked_at TEXT NOT NULL,
            marked_by TEXT
        ) STRICT""",
        "CREATE INDEX review_marks_by_arrival ON review_marks(arrival_id, mark_id)",
    ],
)
MIGRATIONS.append(REVIEW_MIGRATION)


# Where each poller stands, recorded with the reads that moved it: the agent resumes from here
# after a restart (a stop, a crash, a power cut) instead of starting fresh.
POSITIONS_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "tracker positions: last transitionId per source and boot, ring head per device",
    [
        """CREATE TABLE channel_positions(
            source TEXT NOT NULL,
            boot_id TEXT NOT NULL,
            transition_id INTEGER NOT NULL,
            PRIMARY KEY(source, boot_id)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE ring_positions(
            device TEXT PRIMARY KEY,
            head INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID""",
    ],
)
MIGRATIONS.append(POSITIONS_MIGRATION)


# OPC UA Alarms & Conditions (contract 7): how an alarm arrival came (`via` live or refresh),
# and the `absent_at_refresh` anomaly kind. SQLite cannot change a CHECK, so the anomalies table
# is rebuilt with its rows and ids (outbox rows refer to anomaly_id).
ALARMS_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "OPC UA alarms: arrivals.via, the absent_at_refresh anomaly kind",
    [
        "ALTER TABLE arrivals ADD COLUMN via TEXT CHECK (via IN ('live','refresh'))",
        """CREATE TABLE anomalies_v2(
            anomaly_id INTEGER PRIMARY KEY AUTOINCREMENT,
            source TEXT NOT NULL,
            boot_id TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('gap','wrap','reset','overrun','absent_at_refresh')),
            from_value TEXT NOT NULL,
            to_value TEXT NOT NULL,
            detected_at TEXT NOT NULL,
            evidence TEXT NOT NULL DEFAULT '{}',
            UNIQUE(source, boot_id, kind, from_value, to_value)
        ) STRICT""",
        "INSERT INTO anomalies_v2 SELECT anomaly_id, source, boot_id, kind, from_value, to_value,"
        " detected_at, evidence FROM anomalies",
        "DROP TABLE anomalies",
        "ALTER TABLE anomalies_v2 RENAME TO anomalies",
        "CREATE INDEX arrivals_alarms ON arrivals(source, arrival_at) WHERE via IS NOT NULL",
    ],
)
MIGRATIONS.append(ALARMS_MIGRATION)


# The store id (contract section 4): a random UUID (version 4) made when the store is created
# and kept inside it. Upstream, identity-incomplete records are identified by
# `<store id>:<arrival id>`, so arrival ids that start again at 1 in a replaced store never
# meet the old ones. A store made before this migration gets its id when it is migrated.
STORE_ID_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "store id: a random UUID made with the store",
    [
        """CREATE TABLE store_meta(
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) STRICT, WITHOUT ROWID""",
        """INSERT INTO store_meta(name, value)
            SELECT 'store_id', lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3)
                || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(h, 18, 3)
                || '-' || substr(h, 21, 12))
            FROM (SELECT hex(randomblob(16)) AS h)""",
    ],
)
MIGRATIONS.append(STORE_ID_MIGRATION)


# Sparkplug (docs/sparkplug.md): the evidence of every attempt of a row on a Sparkplug upstream,
# the bdSeq of the connection and the seq of the message that carried it (no host acknowledges
# Sparkplug data, so this is what can be shown of each attempt). Gone with its outbox row.
SPARKPLUG_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "Sparkplug: bdSeq and seq of every attempt of an outbox row",
    [
        """CREATE TABLE sparkplug_sends(
            outbox_id INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            bd_seq INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            sent_at TEXT NOT NULL,
            PRIMARY KEY (outbox_id, attempt)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TRIGGER sparkplug_sends_gone AFTER DELETE ON outbox
            BEGIN DELETE FROM sparkplug_sends WHERE outbox_id = old.outbox_id; END""",
    ],
)
MIGRATIONS.append(SPARKPLUG_MIGRATION)


# The event tally (agent/store/tally.py): a re-delivery of an event stored in an earlier batch
# appends its count and arrival time here instead of updating the event's row in every batch;
# folded into `events` in bulk. Append-only between folds, no index. A store made before it gets
# an empty tally: its events' counts are already whole.
TALLY_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "event tally: re-deliveries' counts appended, folded into events in bulk",
    [
        """CREATE TABLE event_tally(
            canonical_id INTEGER NOT NULL,
            later INTEGER NOT NULL,
            last_arrival TEXT NOT NULL
        ) STRICT""",
    ],
)
MIGRATIONS.append(TALLY_MIGRATION)


# Retention's payload stage asks whether any arrival of an event is left. It used to find out
# through an index of the arrivals by canonical id, which every re-delivery of an old event
# wrote at a random place (docs/performance.md); it looks and counts instead: an event's
# arrivals are its first one (`first_arrival_id`, looked up by id) and `duplicate_count` later
# ones, and pruning adds the later ones it removes to `pruned_arrivals`, so none is left when the
# first is gone and `pruned_arrivals >= duplicate_count` (an event never repeated is never
# written by pruning). A store made before it gets the count of the later arrivals already
# pruned (through the index, once), then the index goes.
ARRIVAL_COUNT_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "events count their pruned arrivals; the arrivals' canonical id index goes",
    [
        "ALTER TABLE events ADD COLUMN pruned_arrivals INTEGER NOT NULL DEFAULT 0",
        """UPDATE events SET pruned_arrivals = duplicate_count
            + coalesce((SELECT sum(t.later) FROM event_tally t WHERE t.canonical_id = events.canonical_id), 0)
            - (SELECT count(*) FROM arrivals a WHERE a.canonical_id = events.canonical_id
                AND a.arrival_id <> events.first_arrival_id)""",
        "DROP INDEX arrivals_by_canonical",
    ],
)
MIGRATIONS.append(ARRIVAL_COUNT_MIGRATION)


# Receipts (docs/upstream.md): an outbox row of an upstream that sends receipts (the ledger) is
# `sent` once the broker acknowledged it, and `delivered` only when the ledger's receipt says it
# committed it. SQLite cannot change a CHECK, so the outbox is rebuilt with its rows and ids; its
# AUTOINCREMENT counter is carried over first (an id is never handed out twice, even when the
# newest rows were pruned: a late receipt must never confirm another row), then its index and the
# Sparkplug trigger are made again.
RECEIPTS_MIGRATION: Migration = (
    len(MIGRATIONS) + 1,
    "outbox: the `sent` state (acknowledged by the broker, awaiting the ledger's receipt)",
    [
        """CREATE TABLE outbox_v2(
            outbox_id INTEGER PRIMARY KEY AUTOINCREMENT,
            upstream TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN
                ('transition','boot_observed','gap','anomaly','identity_incomplete')),
            ref_id INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','sent','delivered','rejected')),
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            sent_at TEXT,
            UNIQUE(upstream, kind, ref_id)
        ) STRICT""",
        "INSERT INTO outbox_v2 SELECT outbox_id, upstream, kind, ref_id, state, attempts, last_error,"
        " created_at, sent_at FROM outbox",
        "DELETE FROM sqlite_sequence WHERE name = 'outbox_v2'",
        "INSERT INTO sqlite_sequence(name, seq) SELECT 'outbox_v2', max(seq) FROM"
        " (SELECT seq FROM sqlite_sequence WHERE name = 'outbox'"
        "  UNION ALL SELECT coalesce(max(outbox_id), 0) FROM outbox_v2)",
        "DROP TABLE outbox",
        "ALTER TABLE outbox_v2 RENAME TO outbox",
        "CREATE INDEX outbox_pending ON outbox(upstream, state, outbox_id)",
        """CREATE TRIGGER sparkplug_sends_gone AFTER DELETE ON outbox
            BEGIN DELETE FROM sparkplug_sends WHERE outbox_id = old.outbox_id; END""",
    ],
)
MIGRATIONS.append(RECEIPTS_MIGRATION)

-- The ledger's first schema: canonical events under the identity key, every arrival with its
-- evidence, conflicts for review, boots, gaps and anomalies, the pending list.
-- Rows that name their arrival are written before it in the same transaction (their insert
-- decides the arrival's decision), so those foreign keys are checked at COMMIT.
-- Every unique key leads with `source`, so tables can be distributed or partitioned by source.

CREATE TABLE canonical_event (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source          text NOT NULL,
    transition_id   text NOT NULL,
    boot_id         text NOT NULL,
    source_ts       timestamptz,
    payload         text NOT NULL,          -- RFC 8785 canonical JSON, exactly what was hashed
    payload_hash    text NOT NULL,
    -- Written once, never updated: duplicate_count, conflict_count, first/last arrival and the
    -- status (DuplicateConflict when a conflict arrived) are read from the arrivals (indexed by
    -- canonical_id). Updating a counter here on every duplicate would rewrite this row (its
    -- payload too) for every second arrival of a redundant pair and make two arbiters queue on it.
    inserted_arrival_at timestamptz NOT NULL,   -- arrivalAt of the delivery that inserted it
    first_gateway   text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT canonical_event_key UNIQUE (source, transition_id, boot_id)
);

CREATE TABLE arrival (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind               text CHECK (kind IN ('transition', 'boot_observed', 'gap', 'anomaly',
                                            'identity_incomplete')),
    decision           text NOT NULL CHECK (decision IN ('inserted', 'duplicate', 'conflict',
                                                         'identity_incomplete', 'rejected')),
    -- No foreign key: the arbiter takes every canonical_id from a row it just read or inserted,
    -- and canonical rows are never deleted; the per-row check cost ~15 % of a batch.
    canonical_id       bigint,
    source             text,
    transition_id      text,
    boot_id            text,
    source_ts          timestamptz,
    payload_hash       text,
    reason             text,
    flags              text[] NOT NULL DEFAULT '{}',
    gateway            text NOT NULL,
    gateway_arrival_at timestamptz NOT NULL,
    attempt            integer,
    replayed           boolean,
    received_at        timestamptz NOT NULL,
    via                text NOT NULL CHECK (via IN ('mqtt', 'http', 'import')),
    line               integer,
    ce_id              text,
    raw                bytea NOT NULL
);
CREATE INDEX arrival_canonical ON arrival (canonical_id);

-- A conflicting arrival's own content, beside the canonical's (never overwritten): both originals.
CREATE TABLE conflict (
    arrival_id   bigint PRIMARY KEY REFERENCES arrival (id) DEFERRABLE INITIALLY DEFERRED,
    canonical_id bigint NOT NULL REFERENCES canonical_event (id),
    payload      text NOT NULL,
    payload_hash text NOT NULL,
    source_ts    timestamptz,
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved'))
);
CREATE INDEX conflict_canonical ON conflict (canonical_id);

-- BootObserved: one per (device, boot). `device` is the device name for an import and the
-- boot's CloudEvents source (<site>/<device>) for one received from a gateway.
CREATE TABLE boot (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    device           text NOT NULL,
    boot_id          text NOT NULL,
    previous_boot_id text,
    first_arrival    timestamptz NOT NULL,
    source_ts        timestamptz,
    live             boolean NOT NULL,
    evidence         text NOT NULL,
    arrival_id       bigint REFERENCES arrival (id) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT boot_key UNIQUE (device, boot_id)
);

-- The latest boot first seen live per device: previous_bootId of the next live boot.
CREATE TABLE device_state (
    device         text PRIMARY KEY,
    last_live_boot text NOT NULL
);

-- Gaps and anomalies as the gateways send them; unique on their CloudEvents (source, id).
CREATE TABLE anomaly (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text NOT NULL,
    ce_id       text NOT NULL,
    boot_id     text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('gap', 'wrap', 'reset', 'overrun')),
    from_value  text NOT NULL,
    to_value    text NOT NULL,
    detected_at timestamptz NOT NULL,
    evidence    text NOT NULL,
    arrival_id  bigint REFERENCES arrival (id) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT anomaly_key UNIQUE (source, ce_id)
);

-- Identity-incomplete arrivals wait here for a person; one received as a gateway's record is
-- unique on its CloudEvents (source, id), one from an import line has neither.
CREATE TABLE pending (
    arrival_id bigint PRIMARY KEY REFERENCES arrival (id) DEFERRABLE INITIALLY DEFERRED,
    source     text,
    ce_id      text,
    state      text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    CONSTRAINT pending_key UNIQUE (source, ce_id)
);

-- Retention with an identity horizon (ledger.md "Retention and the identity horizon", issue 33).
--
-- The compact identity of a canonical event is its own `canonical_event` row with the payload
-- cleared: the key (the unique constraint `canonical_event_key` the arbiter relies on), the
-- payload hash, the canonical id, the first arrival time and the first gateway stay. The arbiter
-- reads (id, payload_hash) only, so its hot path is unchanged: a re-delivery of a key whose
-- payload was pruned is decided against the same row, `duplicate` or `conflict`.
ALTER TABLE canonical_event ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE canonical_event ADD COLUMN payload_pruned_at timestamptz;
ALTER TABLE canonical_event ADD CONSTRAINT canonical_event_payload_kept
    CHECK (payload IS NOT NULL OR payload_pruned_at IS NOT NULL);

-- Identities leave at the identity horizon, by event time (source time, else the first arrival's
-- gateway time): `canonical_event_source_ts` (0003) finds those with a source time; this partial
-- index the others (written only for a canonical without a source time).
CREATE INDEX canonical_event_no_source_ts ON canonical_event (inserted_arrival_at) WHERE source_ts IS NULL;

-- A delivery of a key with no identity whose event time is older than the identity horizon:
-- `beyond_horizon`, kept on the pending list for a person (no canonical, no notification).
ALTER TABLE arrival DROP CONSTRAINT arrival_decision_check;
ALTER TABLE arrival ADD CONSTRAINT arrival_decision_check CHECK (decision IN
    ('inserted', 'duplicate', 'conflict', 'identity_incomplete', 'rejected', 'beyond_horizon'));
ALTER TABLE review_mark DROP CONSTRAINT review_mark_kind_check;
ALTER TABLE review_mark ADD CONSTRAINT review_mark_kind_check CHECK (kind IN
    ('conflict', 'identity_incomplete', 'beyond_horizon'));

-- Every prune (`edge-agent ledger prune`, or `ledger run` every `retention.every`): its settings
-- (the identity horizon among them: `ledger import` reads it from the last run), its outcome, and
-- per table the rows archived and pruned and the archive files written.
CREATE TABLE retention_run (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    dry_run     boolean NOT NULL DEFAULT false,
    settings    jsonb NOT NULL,
    outcome     text NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'done', 'archive_failed', 'failed')),
    error       text
);

CREATE TABLE retention_table_run (
    run_id   bigint NOT NULL REFERENCES retention_run (id),
    tbl      text NOT NULL,
    archived bigint NOT NULL DEFAULT 0,
    pruned   bigint NOT NULL DEFAULT 0,
    files    text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, tbl)
);

-- The partitioned_by_source layout as it was for schema versions up to 6 (before 0007, time
-- partitions): the tests of migrations from older versions make their old ledger with it.
-- The ledger's tables hash-partitioned by `source` (docs/ledger.md, "Growing past one server").
-- Run once on a new, migrated, EMPTY ledger database (agent.ledger.layout.partition_by_source):
-- canonical_event, arrival and notification become `PARTITION BY HASH (source)` with the same
-- columns, defaults, identities and checks (CREATE TABLE ... LIKE), their unique keys lead with
-- `source` as before, and keys on `id` become (source, id). A foreign key may not point at an id
-- alone any more, so the foreign keys that did (conflict, pending, boot, anomaly, review_mark ->
-- arrival; conflict, notification -> canonical_event) are dropped: the arbiter writes them in the same
-- transaction as the rows they name; a prune (0006) deletes an arrival or a canonical row only
-- when nothing kept names it (its statements say so in their WHERE, not through a foreign key).
-- The arbiter's statements run unchanged: INSERT ... ON CONFLICT ON CONSTRAINT <the same names>.
-- :partitions is set by the caller (SET ledger.partitions = 'N' before this script).

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM canonical_event) OR EXISTS (SELECT 1 FROM arrival) THEN
        RAISE EXCEPTION 'the partitioned layout is made on an empty ledger database';
    END IF;
    IF to_regclass('canonical_event_p0') IS NOT NULL THEN
        RAISE EXCEPTION 'the ledger database is partitioned already';
    END IF;
END $$;

ALTER TABLE conflict DROP CONSTRAINT conflict_arrival_id_fkey, DROP CONSTRAINT conflict_canonical_id_fkey;
ALTER TABLE pending DROP CONSTRAINT pending_arrival_id_fkey;
ALTER TABLE boot DROP CONSTRAINT boot_arrival_id_fkey;
ALTER TABLE anomaly DROP CONSTRAINT anomaly_arrival_id_fkey;
ALTER TABLE review_mark DROP CONSTRAINT review_mark_arrival_id_fkey;
ALTER TABLE notification DROP CONSTRAINT notification_canonical_id_fkey;

CREATE TABLE canonical_event_new (LIKE canonical_event INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)
    PARTITION BY HASH (source);
DROP TABLE canonical_event;
ALTER TABLE canonical_event_new RENAME TO canonical_event;
ALTER TABLE canonical_event
    ADD CONSTRAINT canonical_event_pkey PRIMARY KEY (source, id),
    ADD CONSTRAINT canonical_event_key UNIQUE (source, transition_id, boot_id);
CREATE INDEX canonical_event_id ON canonical_event (id);
CREATE INDEX canonical_event_source_ts ON canonical_event (source_ts);  -- the review page (0003)
CREATE INDEX canonical_event_no_source_ts ON canonical_event (inserted_arrival_at) WHERE source_ts IS NULL;  -- (0006)

-- A rejected arrival has no source: (source, id) is unique with nulls not distinct, not a primary key.
CREATE TABLE arrival_new (LIKE arrival INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)
    PARTITION BY HASH (source);
DROP TABLE arrival;
ALTER TABLE arrival_new RENAME TO arrival;
ALTER TABLE arrival
    ADD CONSTRAINT arrival_pkey UNIQUE NULLS NOT DISTINCT (source, id),
    ADD CONSTRAINT arrival_key UNIQUE NULLS NOT DISTINCT (source, arrival_key);
CREATE INDEX arrival_canonical ON arrival (canonical_id);
CREATE INDEX arrival_gateway_site_received ON arrival (gateway, arrival_site(via, kind, source), received_at);  -- the fleet (0005)

CREATE TABLE notification_new (LIKE notification INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)
    PARTITION BY HASH (source);
DROP TABLE notification;
ALTER TABLE notification_new RENAME TO notification;
ALTER TABLE notification
    ALTER COLUMN source SET NOT NULL,
    ADD CONSTRAINT notification_pkey PRIMARY KEY (source, id),
    ADD CONSTRAINT notification_key UNIQUE (source, canonical_id, kind);
CREATE INDEX notification_due ON notification (visible_at, id) WHERE state = 'pending';
CREATE INDEX notification_state ON notification (state, id);  -- the review page (0003)

DO $$
DECLARE
    n integer := current_setting('ledger.partitions')::integer;
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['canonical_event', 'arrival', 'notification'] LOOP
        FOR i IN 0 .. n - 1 LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES WITH (MODULUS %s, REMAINDER %s)',
                           t || '_p' || i, t, n, i);
        END LOOP;
    END LOOP;
END $$;

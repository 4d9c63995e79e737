-- Time partitions (ledger.md section 8, issue 33): `arrival` by `received_at` and `notification` by
-- `created_at` become PARTITION BY RANGE, so a prune drops (truncates) a whole period instead of
-- deleting its rows one by one. The ledger makes the partitions itself, ahead of time
-- (agent/ledger/time_partitions.py: the current and the next periods, `retention.partition`).
--
-- No row is rewritten: the existing table becomes one partition, `<table>_legacy`, for every time
-- up to the start of the month after its newest row (or now, whichever is later); a DEFAULT
-- partition takes any row no period covers (a clock far ahead, a period not made yet), so no
-- delivery is ever refused for want of a partition. The migration builds the new keys' indexes on
-- the legacy partition and reads it once to validate its bound (docs/retention.md: time measured).
--
-- Keys. A unique key of a partitioned table must hold its partition key, so:
-- * arrival_pkey is (id, received_at) ((source, id, received_at) on the partitioned_by_source
--   layout); ids stay unique through their sequence. The foreign keys that named arrival(id)
--   (conflict, pending, boot, anomaly, review_mark) are dropped, as that layout does already: the
--   arbiter writes them with the arrival in one transaction, and a prune takes an arrival only when
--   nothing kept names it (prune_sql.KEPT_ARRIVAL, in its WHERE).
-- * arrival_key, unique on (source, arrival_key), is a unique index on every leaf partition (made
--   with it), no longer on the whole table: the arbiter reads a batch's keys in every partition
--   before it writes (arrival_keys.READ_KNOWN), so a re-run batch adds no second arrival; the index
--   stops two instances racing on one key inside one period (docs/retention.md says the limit).
-- * notification_key is (canonical_id, kind, created_at) (with `source` first on that layout): a
--   notification is only written in the transaction that inserted its canonical, whose rows all
--   have that transaction's now(), so it is unique exactly where (canonical_id, kind) was.
-- The canonical events (the arbiter's key, the compact identity) are not time-partitioned.

ALTER TABLE conflict DROP CONSTRAINT IF EXISTS conflict_arrival_id_fkey;
ALTER TABLE pending DROP CONSTRAINT IF EXISTS pending_arrival_id_fkey;
ALTER TABLE boot DROP CONSTRAINT IF EXISTS boot_arrival_id_fkey;
ALTER TABLE anomaly DROP CONSTRAINT IF EXISTS anomaly_arrival_id_fkey;
ALTER TABLE review_mark DROP CONSTRAINT IF EXISTS review_mark_arrival_id_fkey;

DO $$
DECLARE
    -- the partitioned_by_source layout: arrival is hash-partitioned already
    hashed boolean := (SELECT relkind = 'p' FROM pg_class WHERE oid = 'arrival'::regclass);
    s text := CASE WHEN hashed THEN 'source, ' ELSE '' END;
    pk text := CASE WHEN hashed THEN 'UNIQUE NULLS NOT DISTINCT' ELSE 'PRIMARY KEY' END;
    next_id bigint;
    newest timestamptz;
    upto timestamptz;
BEGIN
    -- arrival
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
                   pg_get_serial_sequence('arrival', 'id')) INTO next_id;
    SELECT max(received_at) INTO newest FROM arrival;
    upto := (date_trunc('month', greatest(now(), newest) AT TIME ZONE 'UTC') + interval '1 month')
            AT TIME ZONE 'UTC';
    ALTER TABLE arrival RENAME TO arrival_legacy;
    ALTER TABLE arrival_legacy RENAME CONSTRAINT arrival_key TO arrival_legacy_arrival_key;
    ALTER TABLE arrival_legacy DROP CONSTRAINT arrival_pkey;
    ALTER INDEX arrival_canonical RENAME TO arrival_legacy_canonical;
    ALTER INDEX arrival_gateway_site_received RENAME TO arrival_legacy_gateway_site_received;
    ALTER TABLE arrival_legacy ALTER COLUMN id DROP IDENTITY;
    CREATE TABLE arrival (LIKE arrival_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (received_at);
    EXECUTE format('ALTER TABLE arrival ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', next_id);
    EXECUTE format('ALTER TABLE arrival ADD CONSTRAINT arrival_pkey %s (%sid, received_at)', pk, s);
    CREATE INDEX arrival_canonical ON arrival (canonical_id);
    CREATE INDEX arrival_gateway_site_received ON arrival (gateway, arrival_site(via, kind, source), received_at);
    CREATE TABLE arrival_default PARTITION OF arrival DEFAULT;
    CREATE UNIQUE INDEX arrival_default_arrival_key ON arrival_default (source, arrival_key) NULLS NOT DISTINCT;
    IF newest IS NULL THEN
        DROP TABLE arrival_legacy;
    ELSE
        EXECUTE format('ALTER TABLE arrival ATTACH PARTITION arrival_legacy FOR VALUES FROM (MINVALUE) TO (%L)', upto);
    END IF;

    -- notification
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
                   pg_get_serial_sequence('notification', 'id')) INTO next_id;
    SELECT max(created_at) INTO newest FROM notification;
    upto := (date_trunc('month', greatest(now(), newest) AT TIME ZONE 'UTC') + interval '1 month')
            AT TIME ZONE 'UTC';
    ALTER TABLE notification RENAME TO notification_legacy;
    ALTER TABLE notification_legacy DROP CONSTRAINT notification_pkey;
    ALTER TABLE notification_legacy DROP CONSTRAINT notification_key;
    ALTER INDEX notification_due RENAME TO notification_legacy_due;
    ALTER INDEX notification_state RENAME TO notification_legacy_state;
    ALTER TABLE notification_legacy ALTER COLUMN id DROP IDENTITY;
    CREATE TABLE notification (LIKE notification_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (created_at);
    EXECUTE format('ALTER TABLE notification ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', next_id);
    EXECUTE format('ALTER TABLE notification ADD CONSTRAINT notification_pkey %s (%sid, created_at)',
                   CASE WHEN hashed THEN 'PRIMARY KEY' ELSE pk END, s);
    EXECUTE format('ALTER TABLE notification ADD CONSTRAINT notification_key UNIQUE (%scanonical_id, kind, created_at)', s);
    CREATE INDEX notification_due ON notification (visible_at, id) WHERE state = 'pending';
    CREATE INDEX notification_state ON notification (state, id);
    IF NOT hashed THEN
        -- the legacy partition's own (identical) foreign key is taken over, not checked again
        ALTER TABLE notification ADD CONSTRAINT notification_canonical_id_fkey
            FOREIGN KEY (canonical_id) REFERENCES canonical_event (id);
    END IF;
    CREATE TABLE notification_default PARTITION OF notification DEFAULT;
    IF newest IS NULL THEN
        DROP TABLE notification_legacy;
    ELSE
        EXECUTE format('ALTER TABLE notification ATTACH PARTITION notification_legacy FOR VALUES FROM (MINVALUE) TO (%L)', upto);
    END IF;
END $$;

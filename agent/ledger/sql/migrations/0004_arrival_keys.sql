-- Arrival keys (ledger.md section 7): a batch run again after its COMMIT went unanswered (a
-- failover, a cut connection) adds no second arrival. The key is a SHA-256 the arbiter makes of
-- the delivery (agent/ledger/arrival_keys.py); it leads with `source` like every unique key,
-- nulls not distinct because a rejected arrival has no source. Arrivals written before this
-- migration get their own id as the key (8 bytes, never equal to a 32-byte digest): this
-- rewrites the arrival table once.
ALTER TABLE arrival ADD COLUMN arrival_key bytea;
UPDATE arrival SET arrival_key = int8send(id);
ALTER TABLE arrival ALTER COLUMN arrival_key SET NOT NULL;
ALTER TABLE arrival ADD CONSTRAINT arrival_key UNIQUE NULLS NOT DISTINCT (source, arrival_key);

-- The notification's source (its canonical's), so the outbox can be partitioned or distributed by
-- source like the tables it is written with (docs/ledger.md, "Growing past one server").
ALTER TABLE notification ADD COLUMN source text;
UPDATE notification n SET source = c.source FROM canonical_event c WHERE c.id = n.canonical_id;

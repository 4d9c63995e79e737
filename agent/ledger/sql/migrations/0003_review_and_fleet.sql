-- What people add and what the fleet reports (operator.md sections 1 and 3).
-- review_mark: a person's note on a conflict or a pending arrival; appended, never updated or
-- deleted (the arrival, its canonical and the pending list stay as they are).
-- gateway_status: the latest status record of each gateway; not an event (no identity, never in
-- the event tables), one row per gateway, replaced by the next record.
-- The indexes serve the review page's queries (a gateway's latest arrivals, events by source time,
-- notifications by state) so no page reads a whole table.

CREATE TABLE review_mark (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    arrival_id bigint NOT NULL REFERENCES arrival (id),
    kind       text NOT NULL CHECK (kind IN ('conflict', 'identity_incomplete')),
    note       text NOT NULL CHECK (btrim(note) <> ''),
    marked_at  timestamptz NOT NULL DEFAULT now(),
    marked_by  text
);
CREATE INDEX review_mark_arrival ON review_mark (arrival_id, id);

CREATE TABLE gateway_status (
    gateway       text PRIMARY KEY,
    agent_version text,
    reported_at   timestamptz,
    received_at   timestamptz NOT NULL,
    via           text NOT NULL CHECK (via IN ('mqtt', 'http')),
    status        jsonb NOT NULL
);

CREATE INDEX arrival_gateway_received ON arrival (gateway, received_at);
CREATE INDEX canonical_event_source_ts ON canonical_event (source_ts);
CREATE INDEX notification_state ON notification (state, id);

-- The notification outbox: side effects apart from deduplication (ledger.md section 4).
-- One row per matching rule, written in the transaction that inserted the canonical event;
-- unique on (canonical_id, kind). `visible_at` is both the lease of a claimed row and the
-- backoff of a failed one: a row whose worker died comes back by itself when it passes.
CREATE TABLE notification (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    canonical_id    bigint NOT NULL REFERENCES canonical_event (id),
    kind            text NOT NULL,
    url             text NOT NULL,
    idempotency_key text NOT NULL,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'dead')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    integer NOT NULL CHECK (max_attempts >= 1),
    lease_s         integer NOT NULL DEFAULT 30 CHECK (lease_s >= 1),
    visible_at      timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    errors          text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    CONSTRAINT notification_key UNIQUE (canonical_id, kind)
);
CREATE INDEX notification_due ON notification (visible_at, id) WHERE state = 'pending';

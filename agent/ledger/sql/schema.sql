-- The ledger schema as the migrations make it: a normalised `pg_dump --schema-only`.
-- Generated; never edit by hand. Regenerate: EDGE_LEDGER_WRITE_SCHEMA=1 pytest tests/ledger/test_schema.py
CREATE FUNCTION public.arrival_site(via text, kind text, source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN (via = 'import'::text) THEN ''::text WHEN (kind = ANY (ARRAY['transition'::text, 'gap'::text, 'anomaly'::text])) THEN COALESCE("substring"(source, '^(.+)/[^/]+/[^/]+$'::text), ''::text) WHEN (kind = ANY (ARRAY['boot_observed'::text, 'identity_incomplete'::text])) THEN COALESCE("substring"(source, '^(.+)/[^/]+$'::text), ''::text) ELSE ''::text END;

CREATE TABLE public.anomaly (
    id bigint NOT NULL,
    source text NOT NULL,
    ce_id text NOT NULL,
    boot_id text NOT NULL,
    kind text NOT NULL,
    from_value text NOT NULL,
    to_value text NOT NULL,
    detected_at timestamp with time zone NOT NULL,
    evidence text NOT NULL,
    arrival_id bigint,
    CONSTRAINT anomaly_kind_check CHECK ((kind = ANY (ARRAY['gap'::text, 'wrap'::text, 'reset'::text, 'overrun'::text])))
);

ALTER TABLE public.anomaly ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.anomaly_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.arrival (
    id bigint NOT NULL,
    kind text,
    decision text NOT NULL,
    canonical_id bigint,
    source text,
    transition_id text,
    boot_id text,
    source_ts timestamp with time zone,
    payload_hash text,
    reason text,
    flags text[] DEFAULT '{}'::text[] NOT NULL,
    gateway text NOT NULL,
    gateway_arrival_at timestamp with time zone NOT NULL,
    attempt integer,
    replayed boolean,
    received_at timestamp with time zone NOT NULL,
    via text NOT NULL,
    line integer,
    ce_id text,
    raw bytea NOT NULL,
    arrival_key bytea NOT NULL,
    CONSTRAINT arrival_decision_check CHECK ((decision = ANY (ARRAY['inserted'::text, 'duplicate'::text, 'conflict'::text, 'identity_incomplete'::text, 'rejected'::text, 'beyond_horizon'::text]))),
    CONSTRAINT arrival_kind_check CHECK ((kind = ANY (ARRAY['transition'::text, 'boot_observed'::text, 'gap'::text, 'anomaly'::text, 'identity_incomplete'::text]))),
    CONSTRAINT arrival_via_check CHECK ((via = ANY (ARRAY['mqtt'::text, 'http'::text, 'import'::text])))
)
PARTITION BY RANGE (received_at);

CREATE TABLE public.arrival_default (
    id bigint NOT NULL,
    kind text,
    decision text NOT NULL,
    canonical_id bigint,
    source text,
    transition_id text,
    boot_id text,
    source_ts timestamp with time zone,
    payload_hash text,
    reason text,
    flags text[] DEFAULT '{}'::text[] NOT NULL,
    gateway text NOT NULL,
    gateway_arrival_at timestamp with time zone NOT NULL,
    attempt integer,
    replayed boolean,
    received_at timestamp with time zone NOT NULL,
    via text NOT NULL,
    line integer,
    ce_id text,
    raw bytea NOT NULL,
    arrival_key bytea NOT NULL,
    CONSTRAINT arrival_decision_check CHECK ((decision = ANY (ARRAY['inserted'::text, 'duplicate'::text, 'conflict'::text, 'identity_incomplete'::text, 'rejected'::text, 'beyond_horizon'::text]))),
    CONSTRAINT arrival_kind_check CHECK ((kind = ANY (ARRAY['transition'::text, 'boot_observed'::text, 'gap'::text, 'anomaly'::text, 'identity_incomplete'::text]))),
    CONSTRAINT arrival_via_check CHECK ((via = ANY (ARRAY['mqtt'::text, 'http'::text, 'import'::text])))
);

ALTER TABLE public.arrival ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.arrival_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.boot (
    id bigint NOT NULL,
    device text NOT NULL,
    boot_id text NOT NULL,
    previous_boot_id text,
    first_arrival timestamp with time zone NOT NULL,
    source_ts timestamp with time zone,
    live boolean NOT NULL,
    evidence text NOT NULL,
    arrival_id bigint
);

ALTER TABLE public.boot ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.boot_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.canonical_event (
    id bigint NOT NULL,
    source text NOT NULL,
    transition_id text NOT NULL,
    boot_id text NOT NULL,
    source_ts timestamp with time zone,
    payload text,
    payload_hash text NOT NULL,
    inserted_arrival_at timestamp with time zone NOT NULL,
    first_gateway text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    payload_pruned_at timestamp with time zone,
    CONSTRAINT canonical_event_payload_kept CHECK (((payload IS NOT NULL) OR (payload_pruned_at IS NOT NULL)))
);

ALTER TABLE public.canonical_event ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.canonical_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.conflict (
    arrival_id bigint NOT NULL,
    canonical_id bigint NOT NULL,
    payload text NOT NULL,
    payload_hash text NOT NULL,
    source_ts timestamp with time zone,
    state text DEFAULT 'open'::text NOT NULL,
    CONSTRAINT conflict_state_check CHECK ((state = ANY (ARRAY['open'::text, 'resolved'::text])))
);

CREATE TABLE public.device_state (
    device text NOT NULL,
    last_live_boot text NOT NULL
);

CREATE TABLE public.gateway_status (
    gateway text NOT NULL,
    agent_version text,
    reported_at timestamp with time zone,
    received_at timestamp with time zone NOT NULL,
    via text NOT NULL,
    status jsonb NOT NULL,
    site text NOT NULL,
    CONSTRAINT gateway_status_via_check CHECK ((via = ANY (ARRAY['mqtt'::text, 'http'::text])))
);

CREATE TABLE public.ledger_schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.notification (
    id bigint NOT NULL,
    canonical_id bigint NOT NULL,
    kind text NOT NULL,
    url text NOT NULL,
    idempotency_key text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    lease_s integer DEFAULT 30 NOT NULL,
    visible_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    errors text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    source text,
    CONSTRAINT notification_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT notification_lease_s_check CHECK ((lease_s >= 1)),
    CONSTRAINT notification_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT notification_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'sent'::text, 'dead'::text])))
)
PARTITION BY RANGE (created_at);

CREATE TABLE public.notification_default (
    id bigint NOT NULL,
    canonical_id bigint NOT NULL,
    kind text NOT NULL,
    url text NOT NULL,
    idempotency_key text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    lease_s integer DEFAULT 30 NOT NULL,
    visible_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    errors text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    source text,
    CONSTRAINT notification_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT notification_lease_s_check CHECK ((lease_s >= 1)),
    CONSTRAINT notification_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT notification_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'sent'::text, 'dead'::text])))
);

ALTER TABLE public.notification ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.notification_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.pending (
    arrival_id bigint NOT NULL,
    source text,
    ce_id text,
    state text DEFAULT 'open'::text NOT NULL,
    CONSTRAINT pending_state_check CHECK ((state = ANY (ARRAY['open'::text, 'resolved'::text])))
);

CREATE TABLE public.retention_run (
    id bigint NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    dry_run boolean DEFAULT false NOT NULL,
    settings jsonb NOT NULL,
    outcome text DEFAULT 'running'::text NOT NULL,
    error text,
    CONSTRAINT retention_run_outcome_check CHECK ((outcome = ANY (ARRAY['running'::text, 'done'::text, 'archive_failed'::text, 'failed'::text])))
);

ALTER TABLE public.retention_run ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.retention_run_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.retention_table_run (
    run_id bigint NOT NULL,
    tbl text NOT NULL,
    archived bigint DEFAULT 0 NOT NULL,
    pruned bigint DEFAULT 0 NOT NULL,
    files text[] DEFAULT '{}'::text[] NOT NULL
);

CREATE TABLE public.review_mark (
    id bigint NOT NULL,
    arrival_id bigint NOT NULL,
    kind text NOT NULL,
    note text NOT NULL,
    marked_at timestamp with time zone DEFAULT now() NOT NULL,
    marked_by text,
    CONSTRAINT review_mark_kind_check CHECK ((kind = ANY (ARRAY['conflict'::text, 'identity_incomplete'::text, 'beyond_horizon'::text]))),
    CONSTRAINT review_mark_note_check CHECK ((btrim(note) <> ''::text))
);

ALTER TABLE public.review_mark ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.review_mark_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.arrival ATTACH PARTITION public.arrival_default DEFAULT;

ALTER TABLE ONLY public.notification ATTACH PARTITION public.notification_default DEFAULT;

ALTER TABLE ONLY public.anomaly
    ADD CONSTRAINT anomaly_key UNIQUE (source, ce_id);

ALTER TABLE ONLY public.anomaly
    ADD CONSTRAINT anomaly_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.arrival
    ADD CONSTRAINT arrival_pkey PRIMARY KEY (id, received_at);

ALTER TABLE ONLY public.arrival_default
    ADD CONSTRAINT arrival_default_pkey PRIMARY KEY (id, received_at);

ALTER TABLE ONLY public.boot
    ADD CONSTRAINT boot_key UNIQUE (device, boot_id);

ALTER TABLE ONLY public.boot
    ADD CONSTRAINT boot_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.canonical_event
    ADD CONSTRAINT canonical_event_key UNIQUE (source, transition_id, boot_id);

ALTER TABLE ONLY public.canonical_event
    ADD CONSTRAINT canonical_event_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.conflict
    ADD CONSTRAINT conflict_pkey PRIMARY KEY (arrival_id);

ALTER TABLE ONLY public.device_state
    ADD CONSTRAINT device_state_pkey PRIMARY KEY (device);

ALTER TABLE ONLY public.gateway_status
    ADD CONSTRAINT gateway_status_pkey PRIMARY KEY (site, gateway);

ALTER TABLE ONLY public.ledger_schema_version
    ADD CONSTRAINT ledger_schema_version_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.notification
    ADD CONSTRAINT notification_key UNIQUE (canonical_id, kind, created_at);

ALTER TABLE ONLY public.notification_default
    ADD CONSTRAINT notification_default_canonical_id_kind_created_at_key UNIQUE (canonical_id, kind, created_at);

ALTER TABLE ONLY public.notification
    ADD CONSTRAINT notification_pkey PRIMARY KEY (id, created_at);

ALTER TABLE ONLY public.notification_default
    ADD CONSTRAINT notification_default_pkey PRIMARY KEY (id, created_at);

ALTER TABLE ONLY public.pending
    ADD CONSTRAINT pending_key UNIQUE (source, ce_id);

ALTER TABLE ONLY public.pending
    ADD CONSTRAINT pending_pkey PRIMARY KEY (arrival_id);

ALTER TABLE ONLY public.retention_run
    ADD CONSTRAINT retention_run_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.retention_table_run
    ADD CONSTRAINT retention_table_run_pkey PRIMARY KEY (run_id, tbl);

ALTER TABLE ONLY public.review_mark
    ADD CONSTRAINT review_mark_pkey PRIMARY KEY (id);

CREATE INDEX arrival_canonical ON ONLY public.arrival USING btree (canonical_id);

CREATE UNIQUE INDEX arrival_default_arrival_key ON public.arrival_default USING btree (source, arrival_key) NULLS NOT DISTINCT;

CREATE INDEX arrival_default_canonical_id_idx ON public.arrival_default USING btree (canonical_id);

CREATE INDEX arrival_gateway_site_received ON ONLY public.arrival USING btree (gateway, public.arrival_site(via, kind, source), received_at);

CREATE INDEX arrival_default_gateway_arrival_site_received_at_idx ON public.arrival_default USING btree (gateway, public.arrival_site(via, kind, source), received_at);

CREATE INDEX canonical_event_no_source_ts ON public.canonical_event USING btree (inserted_arrival_at) WHERE (source_ts IS NULL);

CREATE INDEX canonical_event_source_ts ON public.canonical_event USING btree (source_ts);

CREATE INDEX conflict_canonical ON public.conflict USING btree (canonical_id);

CREATE INDEX notification_state ON ONLY public.notification USING btree (state, id);

CREATE INDEX notification_default_state_id_idx ON public.notification_default USING btree (state, id);

CREATE INDEX notification_due ON ONLY public.notification USING btree (visible_at, id) WHERE (state = 'pending'::text);

CREATE INDEX notification_default_visible_at_id_idx ON public.notification_default USING btree (visible_at, id) WHERE (state = 'pending'::text);

CREATE INDEX review_mark_arrival ON public.review_mark USING btree (arrival_id, id);

ALTER INDEX public.arrival_canonical ATTACH PARTITION public.arrival_default_canonical_id_idx;

ALTER INDEX public.arrival_gateway_site_received ATTACH PARTITION public.arrival_default_gateway_arrival_site_received_at_idx;

ALTER INDEX public.arrival_pkey ATTACH PARTITION public.arrival_default_pkey;

ALTER INDEX public.notification_key ATTACH PARTITION public.notification_default_canonical_id_kind_created_at_key;

ALTER INDEX public.notification_pkey ATTACH PARTITION public.notification_default_pkey;

ALTER INDEX public.notification_state ATTACH PARTITION public.notification_default_state_id_idx;

ALTER INDEX public.notification_due ATTACH PARTITION public.notification_default_visible_at_id_idx;

ALTER TABLE ONLY public.conflict
    ADD CONSTRAINT conflict_canonical_id_fkey FOREIGN KEY (canonical_id) REFERENCES public.canonical_event(id);

ALTER TABLE public.notification
    ADD CONSTRAINT notification_canonical_id_fkey FOREIGN KEY (canonical_id) REFERENCES public.canonical_event(id);

ALTER TABLE ONLY public.retention_table_run
    ADD CONSTRAINT retention_table_run_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.retention_run(id);

-- The one description of dispatcher's database, as a fresh database gets it (at its latest
-- version, recorded at the bottom).
--
-- A database made by an earlier release is brought up to date by the numbered migrations in
-- dispatcher/store/migrations/ instead (NNNN_name.sql upgrades version NNNN-1 to NNNN), each
-- applied once, under an advisory lock, by `dispatcher migrate` or at start-up (see
-- docs/operations.md). A change to the schema changes both: this file, and a new migration;
-- tests/store/test_migrations.py checks that a migrated database equals a fresh one.

CREATE TABLE IF NOT EXISTS dispatcher_schema (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Secrets the whole fleet shares (e.g. the key that makes list cursors tamper-evident).
CREATE TABLE IF NOT EXISTS instance_secrets (
    name   text PRIMARY KEY,
    value  bytea NOT NULL
);

-- Ids: a type prefix and 32 hex characters of a random UUID: opaque, URL-safe, unguessable.
-- Python makes the same shape (dispatcher.domain.ids); SQL needs it for set-based inserts.
CREATE OR REPLACE FUNCTION dispatcher_new_id(prefix text) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT prefix || replace(gen_random_uuid()::text, '-', '')
$$;

CREATE TABLE IF NOT EXISTS workspaces (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    demo        boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS phone_numbers (
    id            text PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    number        text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS phone_numbers_workspace ON phone_numbers (workspace_id);

-- API keys are stored as SHA-256 of the key: keys are 256-bit random tokens, so a fast hash is
-- as safe as a slow one and lets us look a key up by its hash.
CREATE TABLE IF NOT EXISTS api_keys (
    id            text PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    key_hash      bytea NOT NULL UNIQUE,
    scopes        text[] NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

-- A change to a key (a revocation, a deletion, a workspace's keys cascading away, a TRUNCATE)
-- notifies `dispatcher_api_keys`: every process that keeps valid keys in memory forgets them at
-- once (dispatcher/store/key_cache.py). Inserts need no notice: a new key is looked up.
CREATE OR REPLACE FUNCTION dispatcher_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_api_keys', '');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER api_keys_changed AFTER UPDATE OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_api_keys_changed();

CREATE TABLE IF NOT EXISTS conversations (
    id              text PRIMARY KEY,
    workspace_id    text NOT NULL REFERENCES workspaces (id),
    number_id       text NOT NULL REFERENCES phone_numbers (id),
    contact         text NOT NULL,
    status          text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'done')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_item_at    timestamptz NOT NULL DEFAULT now(),
    last_item_kind  text,
    UNIQUE (number_id, contact)
);
CREATE INDEX IF NOT EXISTS conversations_page
    ON conversations (workspace_id, created_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS messages (
    id               text PRIMARY KEY,
    workspace_id     text NOT NULL REFERENCES workspaces (id),
    number_id        text NOT NULL REFERENCES phone_numbers (id),
    conversation_id  text NOT NULL REFERENCES conversations (id),
    direction        text NOT NULL CHECK (direction IN ('incoming', 'outgoing')),
    from_number      text NOT NULL,
    to_number        text NOT NULL,
    text             text NOT NULL,
    media            jsonb NOT NULL DEFAULT '[]',
    status           text NOT NULL
        CHECK (status IN ('queued', 'sent', 'delivered', 'undelivered', 'received')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- When the carrier should next move this message along (sandbox carrier).
    carrier_due_at   timestamptz
);
CREATE INDEX IF NOT EXISTS messages_page ON messages (workspace_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS messages_carrier_due ON messages (carrier_due_at)
    WHERE status IN ('queued', 'sent');

CREATE TABLE IF NOT EXISTS calls (
    id                text PRIMARY KEY,
    workspace_id      text NOT NULL REFERENCES workspaces (id),
    number_id         text NOT NULL REFERENCES phone_numbers (id),
    conversation_id   text NOT NULL REFERENCES conversations (id),
    direction         text NOT NULL CHECK (direction IN ('incoming', 'outgoing')),
    from_number       text NOT NULL,
    to_number         text NOT NULL,
    status            text NOT NULL,
    duration_seconds  integer,
    created_at        timestamptz NOT NULL DEFAULT now()
);

-- Every event, whatever door it came in by. `payload` is the serialized envelope, kept as
-- text so that every attempt sends it byte for byte the same.
--
-- events and deliveries are partitioned by day of creation (UTC) so that retention drops whole
-- partitions instead of deleting rows (no vacuum debt). A delivery always carries its event's
-- created_at, so an event and its deliveries live in partitions of the same day and leave
-- together. Keys include created_at, as partitioning requires.
CREATE TABLE IF NOT EXISTS events (
    id               text NOT NULL,
    workspace_id     text NOT NULL REFERENCES workspaces (id),
    type             text NOT NULL,
    number_id        text,
    source           text NOT NULL,
    payload          text NOT NULL,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- SHA-256 of the publishing request's body as a JSON value (sorted keys, no white space),
    -- kept with events published under an Idempotency-Key: under a used key only the
    -- identical request replays the event; another one is refused. NULL on events published
    -- without a key, and on rows from schema 1 (they replay whatever the request, as they did).
    -- (Last: schema 2 added it, and a migrated table must equal a fresh one.)
    request_fingerprint  bytea,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
-- Idempotency keys are unique per workspace within 24 hours; publish() enforces that under an
-- advisory lock (a unique index cannot span partitions without the partition key).
CREATE INDEX IF NOT EXISTS events_idempotency
    ON events (workspace_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_window ON events (workspace_id, created_at);
-- Rows outside every daily partition land here instead of failing; never dropped.
CREATE TABLE IF NOT EXISTS events_default PARTITION OF events DEFAULT;

CREATE TABLE IF NOT EXISTS webhooks (
    id                          text PRIMARY KEY,
    workspace_id                text NOT NULL REFERENCES workspaces (id),
    url                         text NOT NULL,
    events                      text[] NOT NULL,
    name                        text,
    number_ids                  text[],
    secret                      text NOT NULL,
    previous_secret             text,
    previous_secret_expires_at  timestamptz,
    -- NULL: follow DISPATCHER_MAX_CONCURRENCY_PER_WEBHOOK.
    max_concurrency             integer CHECK (max_concurrency BETWEEN 1 AND 1000),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    disabled_at                 timestamptz,
    disabled_reason             text CHECK (disabled_reason IN ('manual', 'failing', 'gone')),
    deleted_at                  timestamptz,
    -- Start of the current run of failures; NULL after any success (the disable rule's clock).
    failing_since               timestamptz
);
CREATE INDEX IF NOT EXISTS webhooks_page
    ON webhooks (workspace_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX IF NOT EXISTS webhooks_live
    ON webhooks (workspace_id) WHERE deleted_at IS NULL AND disabled_at IS NULL;

-- The history of each delivery: one row per (event, subscription), what the API reads. Its
-- status, attempts and last answer are written once per attempt (by the recorder); nothing
-- the claim changes lives here, and no index covers a column an attempt changes, so those
-- updates are HOT (fillfactor 80 on the partitions).
CREATE TABLE IF NOT EXISTS deliveries (
    id               text NOT NULL,
    workspace_id     text NOT NULL,
    webhook_id       text NOT NULL REFERENCES webhooks (id),
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    -- The event's created_at (same day, same partition as the event).
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- When the next attempt is due (as the API shows it); NULL once settled.
    next_attempt_at  timestamptz,
    delivered_at     timestamptz,
    last_error       text,
    response_status  integer,
    response_ms      integer,
    PRIMARY KEY (id, created_at),
    UNIQUE (webhook_id, event_id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX IF NOT EXISTS deliveries_page
    ON deliveries (webhook_id, created_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS deliveries_default PARTITION OF deliveries DEFAULT;

-- The engine's work: one row per pending delivery, and nothing else. Narrow (only what a
-- claim needs), not partitioned, so its plans do not depend on statistics of many partitions,
-- and it holds the backlog, never the history: its size and its claim cost follow the
-- backlog. A row leaves when its delivery settles.
--
-- `due_at` is when the delivery is next due. A claim sets `lease_owner` and moves `due_at` to
-- 'infinity', so a claimed row leaves the due walk; it comes back when its result is recorded
-- (retry), when its engine releases it (shutdown), or when its engine stops beating
-- (dispatcher_engines): then any live engine hands its rows back at once.
CREATE TABLE IF NOT EXISTS delivery_queue (
    delivery_id  text PRIMARY KEY,
    -- The history row's partition key: (delivery_id, created_at) is its primary key.
    created_at   timestamptz NOT NULL,
    webhook_id   text NOT NULL,
    event_id     text NOT NULL,
    is_test      boolean NOT NULL DEFAULT false,
    due_at       timestamptz NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    lease_owner  text
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.01);
-- The claim walks this in due order (claimed rows sit at 'infinity', past every due one).
CREATE INDEX IF NOT EXISTS delivery_queue_due ON delivery_queue (due_at);
-- Requests in flight per endpoint, across every engine (at most the concurrency limits).
CREATE INDEX IF NOT EXISTS delivery_queue_leased ON delivery_queue (webhook_id, lease_owner)
    WHERE lease_owner IS NOT NULL;
-- Pending work of one endpoint, in due order (the claim's visits; disable, delete).
CREATE INDEX IF NOT EXISTS delivery_queue_webhook ON delivery_queue (webhook_id, due_at);

-- Live engines. Each beats every second (database time); an engine silent for
-- DISPATCHER_HEARTBEAT_TIMEOUT seconds is dead: the next beat of any live engine removes it
-- and hands its leased rows back, due at once, so its slots free within seconds.
CREATE TABLE IF NOT EXISTS dispatcher_engines (
    owner       text PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now()
);

-- Daily partitions [day, day + 1) in UTC for both tables, for every day from p_from to p_to.
-- Deliveries partitions are tuned for their update-heavy life (see docs/scaling.md). A day whose
-- rows already sit in a default partition is skipped (creating it would fail); returns the
-- number of partitions created.
CREATE OR REPLACE FUNCTION dispatcher_ensure_partitions(p_from date, p_to date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    lower_bound timestamptz;
    upper_bound timestamptz;
    suffix text;
    created integer := 0;
BEGIN
    -- Serialise partition creation (start-up of several replicas, maintenance loops).
    PERFORM pg_advisory_xact_lock(hashtext('dispatcher_partitions'));
    FOR day IN SELECT generate_series(p_from, p_to, interval '1 day')::date LOOP
        suffix := to_char(day, 'YYYYMMDD');
        lower_bound := day::timestamp AT TIME ZONE 'UTC';
        upper_bound := (day + 1)::timestamp AT TIME ZONE 'UTC';
        IF to_regclass('events_p' || suffix) IS NULL THEN
            IF EXISTS (SELECT 1 FROM events_default
                       WHERE created_at >= lower_bound AND created_at < upper_bound)
               OR EXISTS (SELECT 1 FROM deliveries_default
                          WHERE created_at >= lower_bound AND created_at < upper_bound) THEN
                RAISE NOTICE 'dispatcher: rows for % are in the default partitions; skipped', day;
                CONTINUE;
            END IF;
            EXECUTE format(
                'CREATE TABLE events_p%s PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                suffix, lower_bound, upper_bound);
            EXECUTE format(
                'CREATE TABLE deliveries_p%s PARTITION OF deliveries FOR VALUES FROM (%L) TO (%L) '
                'WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
                'autovacuum_analyze_scale_factor = 0.02)',
                suffix, lower_bound, upper_bound);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

SELECT dispatcher_ensure_partitions(current_date - 1, current_date + 2);

-- Fan-out: one delivery per live subscription that hears the event's type and number, in one
-- statement, with its row in the queue. No NOTIFY here: a NOTIFY in the publishing
-- transaction takes a cluster-wide lock through the commit (and its WAL flush), which
-- serialises every publisher's commit. The API wakes the engines after its commit; engines
-- also probe the queue when idle (the outbox door).
CREATE OR REPLACE FUNCTION dispatcher_fan_out(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text, p_number_id text
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    fanned integer;
BEGIN
    -- The event's fields come as arguments: no join back to the row just inserted.
    WITH made AS (
        INSERT INTO deliveries
            (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
        SELECT dispatcher_new_id('WD'), p_workspace_id, w.id, p_event_id, p_type, p_created_at,
               p_created_at
        FROM webhooks w
        WHERE w.workspace_id = p_workspace_id
          AND w.deleted_at IS NULL
          AND w.disabled_at IS NULL
          AND p_type = ANY (w.events)
          AND (w.number_ids IS NULL OR p_number_id = ANY (w.number_ids))
        ON CONFLICT (webhook_id, event_id, created_at) DO NOTHING
        RETURNING id, created_at, webhook_id, event_id, next_attempt_at
    )
    INSERT INTO delivery_queue (delivery_id, created_at, webhook_id, event_id, due_at)
    SELECT id, created_at, webhook_id, event_id, next_attempt_at FROM made;
    GET DIAGNOSTICS fanned = ROW_COUNT;
    RETURN fanned;
END
$$;

-- The transactional outbox: an application sharing this database calls this inside its own
-- transaction; the event (and its deliveries) exist if and only if that transaction commits.
--   BEGIN;
--   UPDATE orders SET state = 'paid' WHERE id = 42;
--   SELECT dispatcher_publish_event('WS…', 'contact.updated', '{"id": "CT42"}', NULL);
--   COMMIT;
CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    event_id text := dispatcher_new_id('EV');
    created timestamptz := now();
BEGIN
    IF p_type IS NULL OR p_type = 'webhook.test' OR p_type !~ '^[a-z]+(\.[a-z_]+)+$' THEN
        RAISE EXCEPTION 'dispatcher_publish_event: invalid event type %', p_type
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(p_data) IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_data -> 'id') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'dispatcher_publish_event: data must be an object with a string id'
            USING ERRCODE = '22023';
    END IF;
    IF p_number_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM phone_numbers WHERE id = p_number_id AND workspace_id = p_workspace_id
    ) THEN
        RAISE EXCEPTION 'dispatcher_publish_event: number % is not the workspace''s', p_number_id
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO events (id, workspace_id, type, number_id, source, payload, created_at)
    VALUES (
        event_id, p_workspace_id, p_type, p_number_id, 'outbox',
        jsonb_build_object(
            'id', event_id,
            'type', p_type,
            'apiVersion', '2026-11-01',
            'createdAt', to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'data', p_data
        )::text,
        created
    );
    PERFORM dispatcher_fan_out(event_id, created, p_workspace_id, p_type, p_number_id);
    RETURN event_id;
END
$$;

INSERT INTO dispatcher_schema (version) VALUES (4) ON CONFLICT DO NOTHING;

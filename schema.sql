-- The one description of dispatcher's database.
--
-- Applied at start-up and by `dispatcher migrate`, under an advisory lock, as many times as
-- you like: every statement is idempotent (IF NOT EXISTS, OR REPLACE). A later schema version
-- appends its changes here in the same idempotent style (ALTER TABLE ... ADD COLUMN IF NOT
-- EXISTS, ...) and bumps the version recorded at the bottom, so existing databases migrate by
-- applying the file again.

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
CREATE TABLE IF NOT EXISTS events (
    id               text PRIMARY KEY,
    workspace_id     text NOT NULL REFERENCES workspaces (id),
    type             text NOT NULL,
    number_id        text,
    source           text NOT NULL,
    payload          text NOT NULL,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS events_idempotency
    ON events (workspace_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_window ON events (workspace_id, created_at);

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

-- One row per (event, subscription). While a delivery is pending, `next_attempt_at` is when it
-- is next due; a claim moves it to the lease's expiry, so a claimed row leaves the due set and
-- comes back by itself if its process dies (no separate lease sweep).
CREATE TABLE IF NOT EXISTS deliveries (
    id               text PRIMARY KEY,
    workspace_id     text NOT NULL,
    webhook_id       text NOT NULL REFERENCES webhooks (id),
    event_id         text NOT NULL REFERENCES events (id),
    event_type       text NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz,
    delivered_at     timestamptz,
    last_error       text,
    response_status  integer,
    response_ms      integer,
    lease_owner      text,
    UNIQUE (webhook_id, event_id)
);
-- The claim's index: only due rows, in due order.
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (next_attempt_at)
    WHERE status = 'pending';
-- In-flight rows per subscription (small: at most the concurrency limits).
CREATE INDEX IF NOT EXISTS deliveries_leased ON deliveries (webhook_id)
    WHERE status = 'pending' AND lease_owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS deliveries_pending_by_webhook ON deliveries (webhook_id)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS deliveries_page
    ON deliveries (webhook_id, created_at DESC, id DESC);

-- Fan-out: one delivery per live subscription that hears the event's type and number, in one
-- statement, and a wake-up for the engines (NOTIFY is sent at commit, collapsed per transaction).
CREATE OR REPLACE FUNCTION dispatcher_fan_out(p_event_id text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    fanned integer;
BEGIN
    INSERT INTO deliveries
        (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
    SELECT dispatcher_new_id('WD'), e.workspace_id, w.id, e.id, e.type, e.created_at, e.created_at
    FROM events e
    JOIN webhooks w ON w.workspace_id = e.workspace_id
    WHERE e.id = p_event_id
      AND w.deleted_at IS NULL
      AND w.disabled_at IS NULL
      AND e.type = ANY (w.events)
      AND (w.number_ids IS NULL OR e.number_id = ANY (w.number_ids))
    ON CONFLICT (webhook_id, event_id) DO NOTHING;
    GET DIAGNOSTICS fanned = ROW_COUNT;
    IF fanned > 0 THEN
        PERFORM pg_notify('dispatcher_deliveries', '');
    END IF;
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
    PERFORM dispatcher_fan_out(event_id);
    RETURN event_id;
END
$$;

INSERT INTO dispatcher_schema (version) VALUES (1) ON CONFLICT DO NOTHING;

-- The one description of dispatcher's database, as a fresh database gets it (at its latest
-- version, recorded at the bottom).
--
-- Its functions are not here: they are dispatcher/store/functions.sql's, a repeatable file
-- applied around this one in the same transaction (this file's defaults, generated columns and
-- triggers use them).
--
-- A database made by an earlier release is brought up to date by the numbered migrations in
-- dispatcher/store/migrations/ instead (NNNN_name.sql upgrades version NNNN-1 to NNNN), all of
-- them and functions.sql in one transaction, under an advisory lock, by `dispatcher migrate` or
-- at start-up (see docs/operations.md). A change to a table changes both: this file, and a new
-- migration; a change to a function changes functions.sql alone.
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

CREATE TABLE IF NOT EXISTS workspaces (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    demo        boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The operator sink's own workspace (DISPATCHER_OPERATOR_WEBHOOK_URL): internal, never
    -- listed, and the source of no operational event.
    operator    boolean NOT NULL DEFAULT false
);
-- One operator sink, at most.
CREATE UNIQUE INDEX IF NOT EXISTS workspaces_operator ON workspaces (operator) WHERE operator;
-- The admin API's list of workspaces (GET /v1/admin/workspaces), newest first.
CREATE INDEX IF NOT EXISTS workspaces_page ON workspaces (created_at DESC, id DESC);

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
    revoked_at    timestamptz,
    -- What the key is for, as its creator named it (NULL: unnamed).
    name          text,
    -- The one webhook this key's `webhooks:poll` scope is limited to (NULL: not limited).
    -- (Last: schema 24 added it.)
    webhook_id    text
);
-- A workspace's keys, newest first (GET /v1/admin/workspaces/{id}/keys).
CREATE INDEX IF NOT EXISTS api_keys_page ON api_keys (workspace_id, created_at DESC, id DESC);

CREATE OR REPLACE TRIGGER api_keys_changed AFTER UPDATE OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_api_keys_changed();

-- Portal sessions (docs/console.md, "Portal sessions"): a short-lived link opening the console
-- for one workspace. Only digests of the link's one-time secret and of the credential it was
-- exchanged for are stored (store/portal.py).
CREATE TABLE IF NOT EXISTS portal_sessions (
    id             text PRIMARY KEY,
    workspace_id   text NOT NULL REFERENCES workspaces (id),
    capabilities   text NOT NULL CHECK (capabilities IN ('manage', 'read')),
    parent_origin  text CHECK (char_length(parent_origin) <= 255),
    secret_hash    bytea NOT NULL UNIQUE,
    token_hash     bytea UNIQUE,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    exchanged_at   timestamptz,
    deleted_at     timestamptz
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
    -- NULL once the message is expunged (POST /v1/messages/{id}/expunge): its text is gone.
    text             text,
    media            jsonb NOT NULL DEFAULT '[]',
    status           text NOT NULL
        CHECK (status IN ('queued', 'sent', 'delivered', 'undelivered', 'received')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- When the carrier should next move this message along (sandbox carrier).
    carrier_due_at   timestamptz,
    -- When its text was erased (docs/messages.md, "Removing a message's text"); NULL while
    -- it has it. (Schema 10 added it.)
    expunged_at      timestamptz,
    -- The Idempotency-Key it was sent under (POST /v1/messages) and the keyed fingerprint of
    -- that request's body (as events.request_fingerprint): within 24 hours only the identical
    -- request replays the message; another one is refused. NULL without a key, and once the
    -- message is expunged. (Last: schema 14 added them.)
    idempotency_key      text,
    request_fingerprint  bytea
);
CREATE INDEX IF NOT EXISTS messages_page ON messages (workspace_id, created_at DESC, id DESC);
-- A key is the first request's for 24 hours, then free again, so this is a lookup index, not a
-- unique one: send_message serialises the requests under one key with an advisory lock, as
-- publishing events does.
CREATE INDEX IF NOT EXISTS messages_idempotency
    ON messages (workspace_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
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
    -- HMAC-SHA-256 of the publishing request's body as a JSON value (sorted keys, no white
    -- space; keyed by the instance secret, dispatcher/api/idempotency.py), kept with events
    -- published under an Idempotency-Key: under a used key only the identical request replays
    -- the event; another one is refused. NULL on events published without a key, on rows
    -- from before schema 18 (0018 erased their plain SHA-256) and on expunged events: they
    -- replay whatever the request. (Last: schema 2 added it, and a migrated table must
    -- equal a fresh one.)
    request_fingerprint  bytea,
    -- The W3C traceparent of the span that published the event, when tracing was on
    -- (dispatcher/tracing.py): each attempt's span links to it. NULL otherwise.
    -- (Last: schema 8 added it.)
    trace_context  text,
    -- The event's ordering lane (its `orderingKey`): a fifo subscription attempts the events
    -- of one lane one at a time, in order (docs/webhooks.md). NULL: the shared lane.
    -- (Last: schema 9 added it.)
    ordering_key   text,
    -- When the event's content was erased (docs/events.md, "Removing content"): its payload
    -- is then the envelope with `"data":null`, its deliveries' response excerpts are gone, and
    -- none of them is sent again. NULL otherwise. (Last: schema 10 added it.)
    expunged_at  timestamptz,
    -- The transaction that inserted the event (pg_current_xact_id()): a poll returns only
    -- events of transactions older than every one still running, in (txid, id) order
    -- (docs/webhooks.md, "Poll mode"). NULL on rows from before schema 24, which no poll
    -- returns. (Last: schema 24 added it.)
    txid  xid8 DEFAULT pg_current_xact_id(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
-- Idempotency keys are unique per workspace within 24 hours; publish() enforces that under an
-- advisory lock (a unique index cannot span partitions without the partition key).
CREATE INDEX IF NOT EXISTS events_idempotency
    ON events (workspace_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_window ON events (workspace_id, created_at);
-- A poll's walk: a workspace's events in the order of their transactions.
CREATE INDEX IF NOT EXISTS events_poll ON events (workspace_id, txid, id);
-- Rows outside every daily partition land here instead of failing; never dropped.
CREATE TABLE IF NOT EXISTS events_default PARTITION OF events DEFAULT;

CREATE TABLE IF NOT EXISTS webhooks (
    id                          text PRIMARY KEY,
    workspace_id                text NOT NULL REFERENCES workspaces (id),
    url                         text,
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
    failing_since               timestamptz,
    -- Custom headers, name -> value, sent with every attempt (docs/webhooks.md, "Custom
    -- headers"; the rules: dispatcher/domain/headers.py). The API returns `headers` as they
    -- are and only the names of `secret_headers`; like `secret`, those are kept as given,
    -- since the engine sends them. (Last: schema 12 added them.)
    headers                     jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(headers) = 'object'),
    secret_headers              jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(secret_headers) = 'object'),
    -- The payload filter (`filter`): an event goes here only when its data contains it
    -- (`data @> payload_filter`, under bounds: dispatcher_filter_passes). NULL: every event;
    -- `{}` is stored as NULL. (Last: schema 12 added it.)
    payload_filter              jsonb
        CHECK (jsonb_typeof(payload_filter) = 'object' AND payload_filter <> '{}'),
    -- Requests per second to this endpoint, across every engine (webhook_rates); NULL: none.
    -- (Last: schema 13 added it and `ordering`.)
    rate_limit                  integer CHECK (rate_limit BETWEEN 1 AND 10000),
    -- 'fifo': the deliveries of one ordering lane are attempted one at a time, in order
    -- (delivery_lanes).
    ordering                    text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo')),
    -- Where the payload filter's arrays are (dispatcher_filter_arrays): fan-out reads it to
    -- bound the data arrays it compares (dispatcher_filter_passes). (Last: schema 16 added it.)
    payload_filter_arrays       text[]
        GENERATED ALWAYS AS (dispatcher_filter_arrays(payload_filter)) STORED,
    -- The endpoint's own attempt timeout, in seconds; NULL: DISPATCHER_REQUEST_TIMEOUT.
    -- (Last: schema 19 added it and `retry_schedule`.)
    timeout_seconds             double precision
        CHECK (timeout_seconds >= 0.1 AND timeout_seconds <= 30),
    -- The delays after each failed attempt, in seconds (its length + 1 attempts, then given
    -- up); NULL: DISPATCHER_RETRY_SCHEDULE.
    retry_schedule              integer[]
        CHECK (cardinality(retry_schedule) BETWEEN 1 AND 20
               AND array_ndims(retry_schedule) = 1
               AND 1 <= ALL (retry_schedule) AND 86400 >= ALL (retry_schedule)
               AND array_position(retry_schedule, NULL) IS NULL),
    -- How attempts authenticate (docs/webhooks.md, "Authentication";
    -- dispatcher/domain/endpoint_auth.py): `{"type": "oauth2", "tokenUrl", "clientId",
    -- "clientSecret", "scope"?, "audience"?}`; NULL: none. Like `secret_headers`, kept as given
    -- (the engine sends the client secret to the token URL); the API never returns
    -- `clientSecret`. (Last: schema 20 added it.)
    auth                        jsonb
        CHECK (jsonb_typeof(auth) = 'object' AND auth ? 'type'),
    -- Mutual TLS: `{"clientCertificate", "clientKey", "caCertificate"}` (PEM; the CA may be
    -- null), checked by the API (dispatcher/domain/tls.py); NULL: none. Like `secret_headers`,
    -- kept as given since the engine uses it; answers never carry `clientKey`.
    -- (Last: schema 21 added it.)
    tls                         jsonb CHECK (jsonb_typeof(tls) = 'object'),
    -- Flow control (docs/delivery.md, "Flow control"; domain/flow_control.py): the effective
    -- rate the receiver's 429s adapted, requests a second (NULL: not adapted, `rate_limit` or
    -- none), what it recovers to, its last change and its last decrease. The claim's bucket
    -- runs at coalesce(adapted_rate, rate_limit). (Last: schema 22 added them.)
    adapted_rate                double precision CHECK (adapted_rate > 0),
    adapted_ceiling             double precision CHECK (adapted_ceiling > 0),
    adapted_at                  timestamptz,
    slowed_at                   timestamptz,
    -- 'push': deliveries POSTed to `url`; 'poll': no url, no deliveries, the events read by
    -- GET /v1/webhooks/{id}/poll. (Last: schema 24 added it.)
    mode                        text NOT NULL DEFAULT 'push' CHECK (mode IN ('push', 'poll')),
    CONSTRAINT webhooks_url_by_mode CHECK ((url IS NULL) = (mode = 'poll'))
);
CREATE INDEX IF NOT EXISTS webhooks_adapted ON webhooks (id) WHERE adapted_rate IS NOT NULL;
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

-- The attempt log: every attempt of every delivery, written by the recorder in the same
-- statement as its delivery. `created_at` is when the attempt started; partitioned like
-- deliveries, by the delivery's created_at, so a day's attempts leave with its deliveries.
CREATE TABLE IF NOT EXISTS delivery_attempts (
    id                   text NOT NULL,
    delivery_id          text NOT NULL,
    webhook_id           text NOT NULL,
    delivery_created_at  timestamptz NOT NULL,
    attempt_number       integer NOT NULL,
    created_at           timestamptz NOT NULL,
    response_status      integer,
    response_ms          integer NOT NULL,
    outcome              text NOT NULL,
    error                text,
    response_body        text,
    trigger              text NOT NULL,
    -- A delivery's attempts are numbered without a gap (the record fences each attempt on
    -- the count before it): the key is also how a delivery's attempts are read.
    PRIMARY KEY (delivery_id, attempt_number, delivery_created_at)
) PARTITION BY RANGE (delivery_created_at);
CREATE INDEX IF NOT EXISTS delivery_attempts_webhook
    ON delivery_attempts (webhook_id, created_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS delivery_attempts_default PARTITION OF delivery_attempts DEFAULT;

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
    lease_owner  text,
    -- What made the row due, for its attempt's record: the schedule, a manual retry, a
    -- recover, a test (`trigger` of the attempt log). Back to 'schedule' after an attempt.
    trigger      text NOT NULL DEFAULT 'schedule',
    -- Its event was expunged while this row was leased (an attempt in flight): the record of
    -- that attempt keeps no response excerpt and schedules no retry, and a claim of the row
    -- (its lease handed back unrecorded) gives it up instead of sending it. Rows not leased
    -- then are given up at once, so only leased ones ever carry it.
    expunged     boolean NOT NULL DEFAULT false,
    -- The ordering lane of a fifo subscription's delivery (its event's ordering key, '' for
    -- events without one), and its place in the lane (delivery_lane_seq: later is behind);
    -- both NULL outside lanes (other subscriptions, test deliveries). See delivery_lanes.
    -- (Last: schema 13 added them.)
    lane         text,
    lane_seq     bigint
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.01);
-- The claim walks this in due order (claimed rows sit at 'infinity', past every due one).
CREATE INDEX IF NOT EXISTS delivery_queue_due ON delivery_queue (due_at);
-- Requests in flight per endpoint, across every engine (at most the concurrency limits).
CREATE INDEX IF NOT EXISTS delivery_queue_leased ON delivery_queue (webhook_id, lease_owner)
    WHERE lease_owner IS NOT NULL;
-- Pending work of one endpoint, in due order (the claim's visits; disable, delete).
CREATE INDEX IF NOT EXISTS delivery_queue_webhook ON delivery_queue (webhook_id, due_at);
-- The members of each ordering lane, in lane order (the next one when a head settles).
CREATE INDEX IF NOT EXISTS delivery_queue_lane ON delivery_queue (webhook_id, lane, lane_seq)
    WHERE lane IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS delivery_lane_seq;

-- Ordered delivery (a subscription's `ordering` 'fifo'; docs/delivery.md, "Ordered
-- delivery"): one row per ordering lane with deliveries in the queue, naming its head, the one
-- member that may be attempted (until it settles: delivered or given up). The other members
-- wait "parked" (`due_at` 'infinity', no lease), out of the due walk; when the head settles,
-- the recorder makes the next member (lowest `lane_seq`) the head, due at once
-- (dispatcher_advance_lanes). A claim decides a lane only while it holds its row: it takes
-- the head, parks the members it walked that are not the head, and names a head for a lane
-- that has none (a new lane: its first member). New deliveries join a lane unparked; the
-- first claim that walks one parks it unless it is the head. So every decision about a lane is
-- made by one transaction at a time, with the lane as it is now.
CREATE TABLE IF NOT EXISTS delivery_lanes (
    webhook_id  text NOT NULL,
    lane        text NOT NULL,
    head_id     text NOT NULL,
    PRIMARY KEY (webhook_id, lane)
);
CREATE INDEX IF NOT EXISTS delivery_lanes_head ON delivery_lanes (head_id);

-- Rate limits (a subscription's `rateLimit`, R requests per second; docs/delivery.md, "Rate
-- limits"): one row per limited endpoint, a token bucket shared by every engine. `ready_at` is
-- when the endpoint has a request to start; at time t it has min(B, 1 + R (t - ready_at))
-- (whole ones), where B = 1 + R x 0.03 s: a claim that comes up to 30 ms late still starts
-- what was due, and any 1-second window holds at most about R x 1.03 + 1 requests, within the
-- promised ceil(1.1 R) with about 70 ms to spare for the time between claim and request.
-- Taking n moves it to max(ready_at, t - 0.03 s) + n / R. A claim takes from a bucket under
-- its row lock (database time, one clock for every replica); an endpoint whose `ready_at` is
-- ahead is left out of the claim's walk, like a saturated one. R is the endpoint's effective
-- rate, coalesce(webhooks.adapted_rate, rate_limit) (flow control: an endpoint without a rate
-- limit has a row here while the receiver's 429s have its rate adapted).
CREATE TABLE IF NOT EXISTS webhook_rates (
    webhook_id  text PRIMARY KEY,
    ready_at    timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX IF NOT EXISTS webhook_rates_ready ON webhook_rates (ready_at);

-- Live engines. Each beats every second (database time); an engine silent for
-- DISPATCHER_HEARTBEAT_TIMEOUT seconds is dead: the next beat of any live engine removes it
-- and hands its leased rows back, due at once, so its slots free within seconds.
CREATE TABLE IF NOT EXISTS dispatcher_engines (
    owner       text PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now()
);

-- Endpoint health (GET /v1/webhooks/{id}/stats; dispatcher/store/stats.py): running totals, so
-- that a week of a busy endpoint is read from a few hundred rows, not a million attempts.
--
-- Per endpoint and minute, and per endpoint and hour: the attempts that started then, by
-- outcome, with `response_ms`, a histogram of the response times of those answered
-- (dispatcher/domain/health.py: 103 buckets, one per millisecond below 10 ms, then 10% wide;
-- NULL: none was answered); and the deliveries created then that an attempt settled, by
-- status. The recorder adds each batch in its record transaction, one upsert per endpoint
-- and minute or hour, from what it wrote. An hour also keeps the start of its latest success
-- and failure (the stats' `lastSuccessAt` and `lastFailureAt`).
--
-- Minute rows leave after the longest window, hour rows with retention: the maintenance loop
-- deletes them through BRIN indexes on their time (rows are written in time order). A btree
-- there could tempt the planner, for a read of one endpoint, to walk every endpoint's rows.
CREATE TABLE IF NOT EXISTS webhook_stats_minutes (
    webhook_id        text NOT NULL,
    minute            timestamptz NOT NULL,
    success           integer NOT NULL,
    http_error        integer NOT NULL,
    timeout           integer NOT NULL,
    connection_error  integer NOT NULL,
    blocked           integer NOT NULL,
    response_ms       integer[],
    delivered         integer NOT NULL,
    failed            integer NOT NULL,
    -- The engine that wrote the row: each engine adds to rows of its own, so engines never
    -- wait on one another's rows; reads add them up.
    engine            text NOT NULL,
    PRIMARY KEY (webhook_id, minute, engine)
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS webhook_stats_minutes_age ON webhook_stats_minutes USING brin (minute);
CREATE TABLE IF NOT EXISTS webhook_stats_hours (
    webhook_id        text NOT NULL,
    hour              timestamptz NOT NULL,
    success           integer NOT NULL,
    http_error        integer NOT NULL,
    timeout           integer NOT NULL,
    connection_error  integer NOT NULL,
    blocked           integer NOT NULL,
    response_ms       integer[],
    delivered         integer NOT NULL,
    failed            integer NOT NULL,
    last_success_at   timestamptz,
    last_failure_at   timestamptz,
    engine            text NOT NULL,
    PRIMARY KEY (webhook_id, hour, engine)
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS webhook_stats_hours_age ON webhook_stats_hours USING brin (hour);

-- Changes of a delivery's status made without an attempt (a give-up on disable or delete, a
-- retry, a recover), net, by endpoint and minute of the delivery's creation: kept by the
-- trigger below, whoever makes them. An attempt's own changes are the recorder's to count
-- (above); they are told apart by `attempts`, which only the recorder changes. Apart from the
-- recorder's rows, so that a give-up in a record transaction (after its webhook's row is
-- locked) never waits for a row another engine's record holds: no deadlock.
CREATE TABLE IF NOT EXISTS webhook_status_changes (
    webhook_id  text NOT NULL,
    minute      timestamptz NOT NULL,
    delivered   integer NOT NULL,
    failed      integer NOT NULL,
    PRIMARY KEY (webhook_id, minute)
);
CREATE INDEX IF NOT EXISTS webhook_status_changes_age ON webhook_status_changes USING brin (minute);

CREATE OR REPLACE TRIGGER deliveries_status_changed AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_count_status_changes();

SELECT dispatcher_ensure_partitions(current_date - 1, current_date + 2);

INSERT INTO dispatcher_schema (version) VALUES (24) ON CONFLICT DO NOTHING;

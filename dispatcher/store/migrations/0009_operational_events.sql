-- Schema 9: operational events and ordering keys (docs/events.md, "Operational events";
-- docs/webhooks.md, "Ordered delivery").
--
-- The service publishes events about its own work (webhook.disabled, webhook.enabled,
-- delivery.exhausted, delivery.recovered) into the workspace's stream, never to the
-- subscription they are about; and an event may carry an ordering key. The one writer of
-- `events` and the one way into `deliveries` take both as new arguments.
--
-- Signatures change, so the new functions are made beside the old ones, with every argument
-- required (no call can match both), and the old ones are replaced in place by calls to the
-- new ones. Nothing is dropped: a function dropped while a transaction is in a call to it fails
-- that transaction, and an outbox publish held up by this migration must commit afterwards.
-- The previous release calls the old signatures, by position: the same as before.
--
-- `workspaces.operator` marks the operator sink's internal workspace
-- (DISPATCHER_OPERATOR_WEBHOOK_URL). `events.ordering_key` is the event's lane.
--
-- Locks: ACCESS EXCLUSIVE on `events` and each of its partitions, then on `workspaces`, for catalog
-- changes (a nullable column, or one with a constant default, rewrites nothing): milliseconds.
-- `events` first: an outbox publish locks `events`, then `workspaces` (its foreign key); taking
-- them in the same order, this migration waits for it instead of deadlocking with it.
ALTER TABLE events ADD COLUMN ordering_key text;
ALTER TABLE workspaces ADD COLUMN operator boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX workspaces_operator ON workspaces (operator) WHERE operator;

CREATE OR REPLACE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[], p_due_at timestamptz, p_trigger text,
    p_excluded_webhook_id text
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    fanned integer;
BEGIN
    WITH made AS (
        INSERT INTO deliveries
            (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
        SELECT dispatcher_new_id('WD'), p_workspace_id, hook.id, p_event_id, p_type,
               p_created_at, coalesce(p_due_at, p_created_at)
        FROM (
            -- The subscribers: a one-time filter on p_webhook_ids leaves this branch out
            -- whole when webhooks are named.
            SELECT w.id
            FROM webhooks w
            WHERE p_webhook_ids IS NULL
              AND w.workspace_id = p_workspace_id
              AND w.deleted_at IS NULL
              AND w.disabled_at IS NULL
              AND p_type = ANY (w.events)
              AND (w.number_ids IS NULL OR p_number_id = ANY (w.number_ids))
              AND w.id IS DISTINCT FROM p_excluded_webhook_id
            UNION ALL
            SELECT unnest(p_webhook_ids)
        ) AS hook (id)
        ON CONFLICT (webhook_id, event_id, created_at) DO NOTHING
        RETURNING id, created_at, webhook_id, event_id, next_attempt_at
    )
    INSERT INTO delivery_queue
        (delivery_id, created_at, webhook_id, event_id, is_test, due_at, trigger)
    SELECT id, created_at, webhook_id, event_id, p_type = 'webhook.test', next_attempt_at,
           coalesce(p_trigger, CASE WHEN p_type = 'webhook.test' THEN 'test' ELSE 'schedule' END)
    FROM made;
    GET DIAGNOSTICS fanned = ROW_COUNT;
    RETURN fanned;
END
$$;

CREATE OR REPLACE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[] DEFAULT NULL, p_due_at timestamptz DEFAULT NULL,
    p_trigger text DEFAULT NULL
) RETURNS integer
LANGUAGE sql AS $$
    SELECT dispatcher_add_deliveries(p_event_id, p_created_at, p_workspace_id, p_type,
                                     p_number_id, p_webhook_ids, p_due_at, p_trigger, NULL)
$$;

CREATE OR REPLACE FUNCTION dispatcher_fan_out(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text, p_number_id text
) RETURNS integer
LANGUAGE sql AS $$
    SELECT dispatcher_add_deliveries(p_event_id, p_created_at, p_workspace_id, p_type,
                                     p_number_id, NULL, NULL, NULL, NULL)
$$;

CREATE OR REPLACE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text, p_fingerprint bytea,
    p_webhook_ids text[], p_trace_context text, p_excluded_webhook_id text,
    p_ordering_key text, OUT payload text, OUT fanned integer
)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (id, workspace_id, type, number_id, source, payload, idempotency_key,
                        request_fingerprint, created_at, trace_context, ordering_key)
    VALUES (p_id, p_workspace_id, p_type, p_number_id, p_source,
            dispatcher_envelope(p_id, p_type, p_created_at, p_data), p_idempotency_key,
            p_fingerprint, p_created_at, p_trace_context, p_ordering_key)
    RETURNING events.payload INTO payload;
    fanned := dispatcher_add_deliveries(p_id, p_created_at, p_workspace_id, p_type, p_number_id,
                                        p_webhook_ids, NULL, NULL, p_excluded_webhook_id);
END
$$;

CREATE OR REPLACE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text DEFAULT NULL,
    p_fingerprint bytea DEFAULT NULL, p_webhook_ids text[] DEFAULT NULL,
    p_trace_context text DEFAULT NULL, OUT payload text, OUT fanned integer
)
LANGUAGE sql AS $$
    SELECT * FROM dispatcher_append_event(p_id, p_workspace_id, p_type, p_number_id, p_source,
                                          p_data, p_created_at, p_idempotency_key,
                                          p_fingerprint, p_webhook_ids, p_trace_context,
                                          NULL, NULL)
$$;

CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    event_id text := dispatcher_new_id('EV');
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
    PERFORM dispatcher_append_event(event_id, p_workspace_id, p_type, p_number_id, 'outbox',
                                    p_data::json, now(), NULL, NULL, NULL, NULL, NULL, NULL);
    RETURN event_id;
END
$$;

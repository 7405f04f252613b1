-- Schema 6: one home for each write of an event. The envelope is built by the database alone
-- (`dispatcher_envelope`); `events` is written by `dispatcher_append_event` alone, and
-- `deliveries` (with each new delivery's row in the queue) by `dispatcher_add_deliveries`
-- alone, which also makes the deliveries of a webhook's test and a recover's (named webhooks,
-- a due time, a trigger). The outbox function and the service's publishing statements call
-- them; `dispatcher_fan_out` stays, for the previous release, and calls them too.
--
-- Payloads stored from now on are compact JSON with their keys in one order, whichever door
-- the event came in by; events stored before keep theirs (signatures are over the stored
-- text: each goes out byte for byte as it was stored, as before).
--
-- Locks: none on any table (functions only). Nothing is dropped: a function replaced in
-- place keeps working for a caller in the middle of a call. The previous release keeps
-- running on it: it builds its own envelopes and calls dispatcher_fan_out, which stays.

-- The envelope every delivery of an event carries (docs/events.md), built here and only here:
-- dispatcher_append_event stores its text once, and every attempt sends those bytes. Compact
-- JSON with its keys in this order; `createdAt` in UTC with milliseconds and a `Z`; `data` as
-- given: a json value keeps its text, so the service's data keeps the bytes it serialized
-- (an outbox caller's jsonb is spelled as jsonb spells it). The version is the one
-- dispatcher.domain.events.API_VERSION names (tests/store/test_envelope.py compares them).
--
-- One expression, STABLE and not STRICT: the planner inlines it into the statement that
-- calls it.
CREATE FUNCTION dispatcher_envelope(
    p_id text, p_type text, p_created_at timestamptz, p_data json
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT '{"id":' || to_json(p_id)::text
        || ',"type":' || to_json(p_type)::text
        || ',"apiVersion":"2026-11-01"'
        || ',"createdAt":"'
        || to_char(p_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"'
        || ',"data":' || p_data::text
        || '}'
$$;

-- The one way into `deliveries`: a pending delivery of an event to each webhook that should
-- have it, with its row in the engine's queue, in one statement; a webhook that has this
-- event's delivery already is skipped. Returns how many were made.
--
-- Which webhooks: with p_webhook_ids NULL, every live subscription of the workspace that hears
-- the event's type and number (a new event's fan-out); otherwise exactly those, whatever they
-- hear (a webhook's test event; a recover, whose caller chose them). Due at p_due_at (NULL: as
-- of the event), because of p_trigger (the attempt log's; NULL: a test event's delivery is due
-- because of the test, any other because of the schedule). The event's fields come as
-- arguments: no join back to its row.
--
-- No NOTIFY here: a NOTIFY in the publishing transaction takes a cluster-wide lock through the
-- commit (and its WAL flush), which serialises every publisher's commit. The service wakes
-- the engines after its commit (dispatcher.store.notifications.DELIVERIES_CHANNEL); engines
-- also probe the queue when idle (the outbox door).
CREATE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[] DEFAULT NULL, p_due_at timestamptz DEFAULT NULL,
    p_trigger text DEFAULT NULL
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

-- A new event's fan-out to its subscribers, as releases before schema 6 call it (their
-- publishing statements, during an upgrade): dispatcher_add_deliveries, inlined into the
-- caller's statement. Nothing of this release calls it.
CREATE OR REPLACE FUNCTION dispatcher_fan_out(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text, p_number_id text
) RETURNS integer
LANGUAGE sql AS $$
    SELECT dispatcher_add_deliveries(p_event_id, p_created_at, p_workspace_id, p_type,
                                     p_number_id)
$$;

-- The one way into `events`, whatever the door: the API, inbound messages and calls, the
-- carrier, a webhook's test (dispatcher/store/queries/events.sql), and the outbox function
-- below. Stores the event with its envelope, then makes its deliveries (to p_webhook_ids alone
-- when given: a test). Returns the payload, the envelope's text as every attempt sends it, and
-- how many deliveries were made. p_trace_context is the W3C traceparent of the publishing
-- span, when the service traces (dispatcher/tracing.py): schema 8 adds its column and stores
-- it; until then it is taken and left out, so that the signature never changes (a function
-- replaced in place keeps working for a caller in the middle of a call; a dropped one fails
-- it).
--
-- Called once per event (`SELECT dispatcher_append_event(...)`, which returns one record):
-- one INSERT, then the deliveries as a simple expression.
CREATE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text DEFAULT NULL,
    p_fingerprint bytea DEFAULT NULL, p_webhook_ids text[] DEFAULT NULL,
    p_trace_context text DEFAULT NULL, OUT payload text, OUT fanned integer
)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (id, workspace_id, type, number_id, source, payload, idempotency_key,
                        request_fingerprint, created_at)
    VALUES (p_id, p_workspace_id, p_type, p_number_id, p_source,
            dispatcher_envelope(p_id, p_type, p_created_at, p_data), p_idempotency_key,
            p_fingerprint, p_created_at)
    RETURNING events.payload INTO payload;
    fanned := dispatcher_add_deliveries(p_id, p_created_at, p_workspace_id, p_type, p_number_id,
                                        p_webhook_ids);
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
                                    p_data::json, now());
    RETURN event_id;
END
$$;

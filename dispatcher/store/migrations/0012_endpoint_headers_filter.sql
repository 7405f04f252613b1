-- Schema 12: a subscription's custom headers and payload filter (docs/webhooks.md, "Custom
-- headers" and "Payload filters").
--
-- `webhooks.headers` and `webhooks.secret_headers` (name -> value, sent with every attempt)
-- and `webhooks.payload_filter` (an event goes to the subscription only when its data
-- contains it). The one way into `deliveries` applies the filter: its signature does not
-- change (the event's data is read back from the event's row), so it is replaced in place,
-- and every caller, of this release or the previous one, gets the filter. Nothing is dropped.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` while the columns are added (nullable, or with a
-- constant default: no rewrite) and their CHECKs are verified (one scan of the
-- subscriptions, which are few): milliseconds.
ALTER TABLE webhooks ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(headers) = 'object');
ALTER TABLE webhooks ADD COLUMN secret_headers jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(secret_headers) = 'object');
ALTER TABLE webhooks ADD COLUMN payload_filter jsonb
    CHECK (jsonb_typeof(payload_filter) = 'object' AND payload_filter <> '{}');

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
              -- The payload filter. The event's data is read back from its row (written
              -- before this call, in this transaction) by an uncorrelated subquery: parsed
              -- once per call, and only when a subscriber has a filter.
              AND (w.payload_filter IS NULL
                   OR (SELECT e.payload::jsonb -> 'data' FROM events e
                       WHERE e.id = p_event_id AND e.created_at = p_created_at)
                      @> w.payload_filter)
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

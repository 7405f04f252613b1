-- Schema 16: payload filters are compared under bounds (docs/webhooks.md, "Payload filters").
--
-- `data @> filter` searches a data array once for each element of the filter's array at the
-- same place; fan-out pays that once per filtered subscription, inside the publishing
-- transaction (an outbox caller's own). The API now bounds the filter (4 array elements in all,
-- scalars of at most 64 bytes in arrays, 16 values; dispatcher/domain/payload_filter.py); the database bounds
-- the data compared: `dispatcher_filter_passes`, the one rule fan-out, recover and the filter
-- test share, does not search a data array of more than 128 elements (it does not pass), and
-- gives up past a deadline. `webhooks.payload_filter_arrays` (generated from the filter) holds
-- where the filter's arrays are, so that fan-out does not work it out per subscription.
--
-- `dispatcher_add_deliveries` (the nine-argument one) is replaced in place, same signature: an
-- outbox transaction in a call to it lives through the upgrade. The generated column rewrites
-- `webhooks` under ACCESS EXCLUSIVE (milliseconds per thousand subscriptions): publishing and
-- reading subscriptions wait meanwhile. Filters stored before, beyond the new bounds on the
-- filter, stay and are applied (under the data bound and the deadline); a PATCH of `filter`
-- must meet them.

-- The places of a payload filter's arrays, each as the text of a text[] path (`{tags}`,
-- `{address,lines}`), sorted; NULL when it has none. Only objects are walked: a filter's arrays
-- hold only scalars (dispatcher/domain/payload_filter.py), so an array is never inside another
-- one. Kept beside each filter (webhooks.payload_filter_arrays) so that fan-out reads it, not
-- works it out, per subscription.
CREATE OR REPLACE FUNCTION dispatcher_filter_arrays(p_filter jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    WITH RECURSIVE walk (path, value) AS (
        SELECT ARRAY[]::text[], p_filter
        UNION ALL
        SELECT walk.path || member.key, member.value
        FROM walk,
             jsonb_each(CASE WHEN jsonb_typeof(walk.value) = 'object' THEN walk.value
                             ELSE '{}' END) AS member
    )
    SELECT array_agg(walk.path::text ORDER BY walk.path::text)
    FROM walk
    WHERE jsonb_typeof(walk.value) = 'array'
$$;

-- The one rule of whether an event's data passes a payload filter, whatever asks (fan-out,
-- recover, POST /v1/webhooks/{id}/filter/test): the data contains the filter (`@>`), and no
-- array of the data where the filter has one (p_filter_arrays, dispatcher_filter_arrays of
-- p_filter) holds more than 128 elements. `@>` searches the data's array once for each
-- element of the filter's, so this bounds one comparison's work (4 filter elements at most,
-- the domain's bound, x 128); a longer data array is not searched, and so does not pass
-- (docs/webhooks.md, "Payload filters"; the domain's MAX_COMPARED_ARRAY_ELEMENTS is the same
-- number). No filter passes everything.
--
-- p_deadline (NULL: none): a comparison asked for after it fails with SQLSTATE 57014
-- (query_canceled, as a statement timeout), so that a caller comparing many filters (fan-out)
-- stops in bounded time; the transaction fails, nothing of it is stored.
CREATE OR REPLACE FUNCTION dispatcher_filter_passes(
    p_data jsonb, p_filter jsonb, p_filter_arrays text[], p_deadline timestamptz
) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    place text;
    compared jsonb;
BEGIN
    IF p_filter IS NULL THEN
        RETURN true;
    END IF;
    IF clock_timestamp() > p_deadline THEN
        RAISE EXCEPTION 'dispatcher: comparing the payload filters of the event''s subscribers '
                        'took longer than its time limit'
            USING ERRCODE = '57014';
    END IF;
    IF p_filter_arrays IS NOT NULL THEN
        FOREACH place IN ARRAY p_filter_arrays LOOP
            compared := p_data #> place::text[];
            IF jsonb_typeof(compared) = 'array' AND jsonb_array_length(compared) > 128 THEN
                RETURN false;
            END IF;
        END LOOP;
    END IF;
    RETURN coalesce(p_data @> p_filter, false);
END
$$;

ALTER TABLE webhooks ADD COLUMN payload_filter_arrays text[]
    GENERATED ALWAYS AS (dispatcher_filter_arrays(payload_filter)) STORED;

-- The one way into `deliveries`: a pending delivery of an event to each webhook that should
-- have it, with its row in the engine's queue, in one statement; a webhook that has this
-- event's delivery already is skipped. Returns how many were made.
--
-- Which webhooks: with p_webhook_ids NULL, every live subscription of the workspace that hears
-- the event's type and number and whose payload filter the event's data contains (a new
-- event's fan-out); otherwise exactly those, whatever they hear (a webhook's test event; a
-- recover, whose caller chose them and applied the filter). Due at p_due_at (NULL: as of the
-- event), because of p_trigger (the attempt log's; NULL: a test event's delivery is due
-- because of the test, any other because of the schedule). The event's fields come as
-- arguments: no join back to its row, but for its data when a subscriber has a filter.
--
-- No NOTIFY here: a NOTIFY in the publishing transaction takes a cluster-wide lock through the
-- commit (and its WAL flush), which serialises every publisher's commit. The service wakes
-- the engines after its commit (dispatcher.store.notifications.DELIVERIES_CHANNEL); engines
-- also probe the queue when idle (the outbox door).
--
-- p_excluded_webhook_id: a subscriber left out (an operational event never goes to the
-- subscription it is about; NULL: none). Every argument is required: the shorter signature
-- below, with defaults, is what earlier releases call.
--
-- A fifo subscription's delivery (not a test's) joins its ordering lane, the event's ordering
-- key ('' without one), at the lane's end: unparked, for the first claim that walks it to
-- decide (delivery_lanes). The key is read from the event only when such a subscriber exists.
--
-- Payload filters are compared under bounds (dispatcher_filter_passes) and within a time
-- limit from the start of this fan-out (clock_timestamp() as the call starts: each event's
-- fan-out has its own, so a statement that publishes many events, a batch or an outbox
-- caller's bulk insert, is not failed by the time its other events took): 5 s, or
-- `dispatcher.filter_time_limit` when set. A
-- statement timeout cannot do it: one set inside a function is not armed for the statement
-- already running, and an outbox call runs in the application's own transaction, under its
-- settings.
CREATE OR REPLACE FUNCTION dispatcher_add_deliveries(
    p_event_id text, p_created_at timestamptz, p_workspace_id text, p_type text,
    p_number_id text, p_webhook_ids text[], p_due_at timestamptz, p_trigger text,
    p_excluded_webhook_id text
) RETURNS integer
-- One generic plan for its statement, kept for the session: with the default, the planner
-- prefers a custom plan per call (it can fold p_webhook_ids away), and planning the statement
-- costs Postgres more than running it (publish measured at 550 against 190 µs of CPU with no
-- subscriber).
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    fanned integer;
    -- The filter step's time limit: 5 s, or the setting dispatcher.filter_time_limit (an
    -- interval; per database, role, session or transaction).
    filter_deadline timestamptz := clock_timestamp() + coalesce(
        nullif(current_setting('dispatcher.filter_time_limit', true), '')::interval,
        interval '5 seconds');
BEGIN
    WITH hook (id, fifo) AS (
        -- The subscribers: a one-time filter on p_webhook_ids leaves this branch out whole
        -- when webhooks are named.
        SELECT w.id, w.ordering = 'fifo'
        FROM webhooks w
        WHERE p_webhook_ids IS NULL
          AND w.workspace_id = p_workspace_id
          AND w.deleted_at IS NULL
          AND w.disabled_at IS NULL
          AND p_type = ANY (w.events)
          AND (w.number_ids IS NULL OR p_number_id = ANY (w.number_ids))
          AND w.id IS DISTINCT FROM p_excluded_webhook_id
          -- The payload filter (dispatcher_filter_passes, the one rule). The event's data is
          -- read back from its row (written before this call, in this transaction) by an
          -- uncorrelated subquery: parsed once per call, and only when a subscriber has a
          -- filter. The filter step has a deadline (filter_deadline): past it, the call
          -- fails as a statement timeout would, whoever's transaction it runs in.
          AND (w.payload_filter IS NULL
               OR dispatcher_filter_passes(
                      (SELECT e.payload::jsonb -> 'data' FROM events e
                       WHERE e.id = p_event_id AND e.created_at = p_created_at),
                      w.payload_filter, w.payload_filter_arrays, filter_deadline))
        UNION ALL
        SELECT DISTINCT named.id, coalesce(w.ordering = 'fifo', false)
        FROM unnest(p_webhook_ids) AS named (id)
        LEFT JOIN webhooks w ON w.id = named.id
    ), made AS (
        INSERT INTO deliveries
            (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
        SELECT dispatcher_new_id('WD'), p_workspace_id, hook.id, p_event_id, p_type,
               p_created_at, coalesce(p_due_at, p_created_at)
        FROM hook
        ON CONFLICT (webhook_id, event_id, created_at) DO NOTHING
        RETURNING id, created_at, webhook_id, event_id, next_attempt_at
    )
    INSERT INTO delivery_queue
        (delivery_id, created_at, webhook_id, event_id, is_test, due_at, trigger, lane, lane_seq)
    SELECT made.id, made.created_at, made.webhook_id, made.event_id, p_type = 'webhook.test',
           made.next_attempt_at,
           coalesce(p_trigger, CASE WHEN p_type = 'webhook.test' THEN 'test' ELSE 'schedule' END),
           CASE WHEN hook.fifo AND p_type <> 'webhook.test' THEN
               coalesce((SELECT e.ordering_key FROM events e
                         WHERE e.id = p_event_id AND e.created_at = p_created_at), '')
           END,
           CASE WHEN hook.fifo AND p_type <> 'webhook.test' THEN nextval('delivery_lane_seq') END
    FROM made
    JOIN hook ON hook.id = made.webhook_id;
    GET DIAGNOSTICS fanned = ROW_COUNT;
    RETURN fanned;
END
$$;


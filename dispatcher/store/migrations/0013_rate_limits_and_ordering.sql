-- Schema 13: per-endpoint rate limits and ordered delivery (docs/delivery.md, "Rate limits"
-- and "Ordered delivery"; docs/webhooks.md).
--
-- `webhooks.rate_limit` (requests per second, NULL: none) and `webhooks.ordering` ('none' or
-- 'fifo'). A limited endpoint's token bucket is its row in `webhook_rates`, which every
-- engine's claim takes from. A fifo subscription's deliveries carry their lane and place in it
-- (`delivery_queue.lane`, `lane_seq`); `delivery_lanes` names each lane's head.
--
-- dispatcher_add_deliveries is replaced in place (same signature): a fifo subscription's new
-- delivery joins its lane. The outbox function gets an ordering key: a new signature with
-- every argument required, beside the old one, which is replaced in place by a call to it (a
-- call of three or four arguments matches only the old one, of five only the new one).
-- Nothing is dropped: an outbox publish held up by this migration commits afterwards. The
-- previous release keeps running on the new schema: it never names the new columns (its
-- fan-out makes deliveries outside lanes, as a 'none' subscription's), and every subscription
-- is 'none' without a rate limit until one is set through this release's API. Only this
-- release's engines keep a rate limit or a lane: set them once every engine runs it.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` (its new CHECK constraints read it once: a table of
-- subscriptions, milliseconds) and on `delivery_queue` (nullable columns rewrite nothing; the
-- new partial index reads the backlog once and holds no row).
ALTER TABLE webhooks
    ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 10000),
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo'));
ALTER TABLE delivery_queue ADD COLUMN lane text, ADD COLUMN lane_seq bigint;
CREATE INDEX delivery_queue_lane ON delivery_queue (webhook_id, lane, lane_seq)
    WHERE lane IS NOT NULL;
CREATE SEQUENCE delivery_lane_seq;

CREATE TABLE delivery_lanes (
    webhook_id  text NOT NULL,
    lane        text NOT NULL,
    head_id     text NOT NULL,
    PRIMARY KEY (webhook_id, lane)
);
CREATE INDEX delivery_lanes_head ON delivery_lanes (head_id);

-- Lanes whose head has left the queue get their next head: the recorder calls this with the
-- deliveries its record settled (p_heads), in the same transaction; the maintenance loop with
-- NULL, for any lane whose head is gone whatever the way (a give-up on disable or delete):
-- then lanes a claim or a record holds are left for the next run. The next head is the
-- lane's first member (lowest lane_seq), due at p_now if it was parked; a lane with no member
-- left goes. Returns how many lanes got a new head.
--
-- The lanes are locked first (in key order), and only then are their members read, by a
-- statement of its own: it sees every member committed until then, among them any that a
-- claim parked while it held the lane.
CREATE OR REPLACE FUNCTION dispatcher_advance_lanes(p_heads text[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    locked text[];
    moved integer;
BEGIN
    IF p_heads IS NOT NULL THEN
        SELECT array_agg(l.head_id) INTO locked FROM (
            SELECT head_id FROM delivery_lanes WHERE head_id = ANY (p_heads)
            ORDER BY webhook_id, lane FOR UPDATE
        ) l;
    ELSE
        SELECT array_agg(l.head_id) INTO locked FROM (
            SELECT head_id FROM delivery_lanes
            WHERE NOT EXISTS (SELECT 1 FROM delivery_queue q WHERE q.delivery_id = head_id)
            ORDER BY webhook_id, lane FOR UPDATE SKIP LOCKED
        ) l;
    END IF;
    IF locked IS NULL THEN
        RETURN 0;
    END IF;
    WITH lanes AS (
        SELECT l.webhook_id, l.lane, next.delivery_id AS next_id
        FROM delivery_lanes l
        LEFT JOIN LATERAL (
            SELECT q.delivery_id FROM delivery_queue q
            WHERE q.webhook_id = l.webhook_id AND q.lane = l.lane
            ORDER BY q.lane_seq
            LIMIT 1
        ) next ON true
        WHERE l.head_id = ANY (locked)
          AND NOT EXISTS (SELECT 1 FROM delivery_queue h WHERE h.delivery_id = l.head_id)
    ), gone AS (
        DELETE FROM delivery_lanes l
        USING lanes
        WHERE l.webhook_id = lanes.webhook_id AND l.lane = lanes.lane AND lanes.next_id IS NULL
    ), promoted AS (
        UPDATE delivery_queue q
        SET due_at = p_now
        FROM lanes
        WHERE q.delivery_id = lanes.next_id AND NOT isfinite(q.due_at) AND q.lease_owner IS NULL
    )
    UPDATE delivery_lanes l
    SET head_id = lanes.next_id
    FROM lanes
    WHERE l.webhook_id = lanes.webhook_id AND l.lane = lanes.lane AND lanes.next_id IS NOT NULL;
    GET DIAGNOSTICS moved = ROW_COUNT;
    RETURN moved;
END
$$;

CREATE TABLE webhook_rates (
    webhook_id  text PRIMARY KEY,
    ready_at    timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX webhook_rates_ready ON webhook_rates (ready_at);

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
          -- The payload filter. The event's data is read back from its row (written before
          -- this call, in this transaction) by an uncorrelated subquery: parsed once per
          -- call, and only when a subscriber has a filter.
          AND (w.payload_filter IS NULL
               OR (SELECT e.payload::jsonb -> 'data' FROM events e
                   WHERE e.id = p_event_id AND e.created_at = p_created_at)
                  @> w.payload_filter)
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

CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text, p_ordering_key text
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
    IF p_ordering_key IS NOT NULL AND (
        char_length(p_ordering_key) NOT BETWEEN 1 AND 200
        OR p_ordering_key ~ '[\x01-\x1f\x7f-\x9f]'
    ) THEN
        RAISE EXCEPTION 'dispatcher_publish_event: the ordering key must be 1 to 200 characters '
                        'without control characters'
            USING ERRCODE = '22023';
    END IF;
    PERFORM dispatcher_append_event(event_id, p_workspace_id, p_type, p_number_id, 'outbox',
                                    p_data::json, now(), NULL, NULL, NULL, NULL, NULL,
                                    p_ordering_key);
    RETURN event_id;
END
$$;

CREATE OR REPLACE FUNCTION dispatcher_publish_event(
    p_workspace_id text, p_type text, p_data jsonb, p_number_id text DEFAULT NULL
) RETURNS text
LANGUAGE sql AS $$
    SELECT dispatcher_publish_event(p_workspace_id, p_type, p_data, p_number_id, NULL)
$$;

-- Webhook subscriptions: create, read, update, delete, secrets, disabling
-- (dispatcher/store/webhooks.py). A deleted webhook stays, marked (`deleted_at`): its
-- deliveries' history still names it.

-- name: create
-- A new live subscription: $1 id, $2 workspace, $3 signing secret, $4 time, then its options
-- (`{options}`: the columns of domain/endpoints.py's EndpointOptions, in order, and
-- `{option_parameters}` their parameters, $5 on: store/webhooks.py writes them in); a rate
-- limit gets its bucket (webhook_rates). Returns it as `webhook` does.
WITH made AS (
    INSERT INTO webhooks (id, workspace_id, secret, created_at, {options})
    VALUES ($1, $2, $3, $4, {option_parameters})
    RETURNING id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
), bucket AS (
    INSERT INTO webhook_rates (webhook_id) SELECT id FROM made WHERE rate_limit IS NOT NULL
)
SELECT * FROM made

-- name: webhook
-- Webhook $2 of workspace $1, unless deleted, with its options as answered
-- (`{answered_options}`: a write-only option, the secret headers, by name only, its values
-- withheld: they never leave the database for the API).
SELECT id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
FROM webhooks
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL

-- name: exists
-- Whether workspace $1 has webhook $2 (a deleted one counts when $3).
SELECT EXISTS (
    SELECT 1 FROM webhooks
    WHERE workspace_id = $1 AND id = $2 AND ($3 OR deleted_at IS NULL)
)

-- name: webhooks_page
-- A page of webhooks, as `webhook` answers each (store/pages.py adds the conditions, the order
-- and the limit).
SELECT id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
FROM webhooks

-- name: give_up_pending
-- Settle as failed, with error $2, the pending deliveries of webhooks $1 that are not in
-- flight (leased ones are left to their attempt).
WITH gone AS (
    DELETE FROM delivery_queue
    WHERE webhook_id = ANY($1::text[]) AND lease_owner IS NULL
    RETURNING delivery_id, created_at
)
UPDATE deliveries d
SET status = 'failed', last_error = $2, next_attempt_at = NULL
FROM gone
WHERE d.id = gone.delivery_id AND d.created_at = gone.created_at

-- name: disable
-- Disable the live webhooks among $1 at $2, for reason $3; returns those disabled.
UPDATE webhooks SET disabled_at = $2, disabled_reason = $3
WHERE id = ANY($1::text[]) AND disabled_at IS NULL AND deleted_at IS NULL
RETURNING id, workspace_id

-- name: lock_webhook
-- Lock webhook $2 of workspace $1, unless deleted, for a change; returns whether it is
-- disabled, its custom headers (a change to one object is checked with the other) and its
-- ordering. FOR NO KEY UPDATE, the lock an UPDATE of it takes (its id never changes): FOR
-- UPDATE would also block the FOR KEY SHARE lock that every new delivery takes on its
-- webhook (the foreign key), so a change publishing webhook.disabled to its siblings and a
-- recorder or another change publishing to this one waited for each other: a deadlock. The
-- lock order every writer of webhooks rows keeps is in docs/delivery.md, "Lock order".
SELECT id, disabled_at, headers, secret_headers, ordering FROM webhooks
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL
FOR NO KEY UPDATE

-- name: add_bucket
-- Webhook $1 has a rate limit: its token bucket (webhook_rates), full; one it has is kept.
INSERT INTO webhook_rates (webhook_id) VALUES ($1) ON CONFLICT DO NOTHING

-- name: drop_bucket
-- Webhook $1 has no rate limit any more: its bucket goes.
DELETE FROM webhook_rates WHERE webhook_id = $1

-- name: join_lanes
-- Webhook $1 turned fifo: its deliveries not yet attempted (nor in flight, nor tests) join
-- their ordering lanes, in event order; the claims sort each lane out (schema.sql,
-- delivery_lanes). Deliveries already attempted carry on outside any lane.
UPDATE delivery_queue q
SET lane = joining.lane, lane_seq = joining.seq
FROM (
    SELECT o.delivery_id, o.lane, nextval('delivery_lane_seq') AS seq
    FROM (
        SELECT w.delivery_id, coalesce(e.ordering_key, '') AS lane
        FROM delivery_queue w
        JOIN events e ON e.id = w.event_id AND e.created_at = w.created_at
        WHERE w.webhook_id = $1 AND w.lane IS NULL AND w.attempts = 0
          AND w.lease_owner IS NULL AND NOT w.is_test
        ORDER BY w.created_at, w.event_id
    ) o
) joining
WHERE q.delivery_id = joining.delivery_id AND q.lease_owner IS NULL

-- name: leave_lanes
-- Webhook $1 is no longer fifo: its deliveries leave their lanes, and those waiting in one
-- are due at once ($2). One in flight keeps its lane until it settles (nothing waits on it).
WITH released AS (
    UPDATE delivery_queue
    SET lane = NULL, lane_seq = NULL,
        due_at = CASE WHEN due_at = 'infinity' THEN $2 ELSE due_at END
    WHERE webhook_id = $1 AND lane IS NOT NULL AND lease_owner IS NULL
)
DELETE FROM delivery_lanes WHERE webhook_id = $1

-- name: enable
-- Make webhook $1 live again, its failure clock reset.
UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
WHERE id = $1

-- name: delete
-- Mark webhook $2 of workspace $1 deleted at $3, unless it is already; returns its id.
UPDATE webhooks SET deleted_at = $3
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL
RETURNING id

-- name: secret
-- The signing secret of webhook $2 of workspace $1, unless deleted.
SELECT secret FROM webhooks
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL

-- name: rotate_secret
-- A new signing secret $3 for webhook $2 of workspace $1, unless deleted; the previous one
-- keeps signing beside it until $4. Returns its id.
UPDATE webhooks
SET previous_secret = secret, previous_secret_expires_at = $4, secret = $3
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL
RETURNING id

-- name: demo_secrets
-- The live webhooks of the demo workspace at URL $1, with their signing secret and, until its
-- grace ends (after $2), the previous one (the demo receiver verifies with them).
SELECT w.id, w.secret,
       CASE WHEN w.previous_secret_expires_at > $2 THEN w.previous_secret END AS previous
FROM webhooks w JOIN workspaces ws ON ws.id = w.workspace_id
WHERE ws.demo AND w.url = $1 AND w.deleted_at IS NULL
ORDER BY w.created_at, w.id

-- name: filter_matches
-- Whether data $3 passes a payload filter, as fan-out decides it (dispatcher_filter_passes):
-- webhook $2 of workspace $1's saved one, or $5 instead when $4 (NULL: none); no filter
-- matches all. Nothing when there is no such webhook.
SELECT dispatcher_filter_passes(
           $3::jsonb,
           CASE WHEN $4::boolean THEN $5::jsonb ELSE payload_filter END,
           CASE WHEN $4::boolean THEN dispatcher_filter_arrays($5::jsonb)
                ELSE payload_filter_arrays END,
           NULL) AS matches
FROM webhooks
WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL

-- name: gone
-- Of webhook ids $1, those deleted, or not there at all (the metrics free their series).
SELECT x.id FROM unnest($1::text[]) AS x (id)
WHERE NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = x.id AND w.deleted_at IS NULL)

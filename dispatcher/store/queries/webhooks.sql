-- Webhook subscriptions: create, read, update, delete, secrets, disabling
-- (dispatcher/store/webhooks.py). A deleted webhook stays, marked (`deleted_at`): its
-- deliveries' history still names it.

-- name: create
-- A new live subscription of workspace @workspace_id: its @id, signing @secret and creation
-- time @now, then its options (`{options}`: the columns of domain/endpoints.py's
-- EndpointOptions, in order, and `{option_parameters}` their parameters, each named after its
-- option, `@url, @events, ...`: store/webhooks.py writes them in); a rate limit gets its bucket
-- (webhook_rates). Returns it as `webhook` does.
WITH made AS (
    INSERT INTO webhooks (id, workspace_id, secret, created_at, {options})
    VALUES (@id, @workspace_id, @secret, @now, {option_parameters})
    RETURNING id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
), bucket AS (
    INSERT INTO webhook_rates (webhook_id) SELECT id FROM made WHERE rate_limit IS NOT NULL
)
SELECT * FROM made

-- name: webhook
-- Webhook @webhook_id of workspace @workspace_id, unless deleted, with its options as answered
-- (`{answered_options}`: a write-only option, the secret headers, by name only, its values
-- withheld: they never leave the database for the API).
SELECT id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
FROM webhooks
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL

-- name: exists
-- Whether workspace @workspace_id has webhook @webhook_id (a deleted one counts when
-- @include_deleted).
SELECT EXISTS (
    SELECT 1 FROM webhooks
    WHERE workspace_id = @workspace_id AND id = @webhook_id
      AND (@include_deleted OR deleted_at IS NULL)
)

-- name: webhooks_page
-- Workspace @workspace_id's webhooks (deleted ones left out), as `webhook` answers each. Paged
-- newest first after (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, workspace_id, created_at, disabled_at, disabled_reason, {answered_options}
FROM webhooks
WHERE workspace_id = @workspace_id AND deleted_at IS NULL
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: give_up_pending
-- Settle as failed, with @error, the pending deliveries of @webhook_ids that are not in
-- flight (leased ones are left to their attempt).
WITH gone AS (
    DELETE FROM delivery_queue
    WHERE webhook_id = ANY(@webhook_ids::text[]) AND lease_owner IS NULL
    RETURNING delivery_id, created_at
)
UPDATE deliveries d
SET status = 'failed', last_error = @error, next_attempt_at = NULL
FROM gone
WHERE d.id = gone.delivery_id AND d.created_at = gone.created_at

-- name: disable
-- Disable the live webhooks among @webhook_ids at @now, for @reason; returns those disabled.
UPDATE webhooks SET disabled_at = @now, disabled_reason = @reason
WHERE id = ANY(@webhook_ids::text[]) AND disabled_at IS NULL AND deleted_at IS NULL
RETURNING id, workspace_id

-- name: lock_webhook
-- Lock webhook @webhook_id of workspace @workspace_id, unless deleted, for a change; returns
-- whether it is disabled, its custom headers (a change to one object is checked with the
-- other), its ordering and its auth (a PATCH may keep its client secret). FOR NO KEY UPDATE, the lock an UPDATE of it takes (its id never
-- changes): FOR UPDATE would also block the FOR KEY SHARE lock that every new delivery takes
-- on its webhook (the foreign key), so a change publishing webhook.disabled to its siblings
-- and a recorder or another change publishing to this one waited for each other: a deadlock.
-- The lock order every writer of webhooks rows keeps is in docs/delivery.md, "Lock order".
SELECT id, disabled_at, headers, secret_headers, ordering, auth, mode FROM webhooks
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL
FOR NO KEY UPDATE

-- name: add_bucket
-- Webhook @webhook_id has a rate limit: its token bucket (webhook_rates), full; one it has is
-- kept. A rate limit set starts flow control over (docs/delivery.md, "Flow control"): the rate
-- the receiver's 429s adapted is forgotten.
WITH bucket AS (
    INSERT INTO webhook_rates (webhook_id) VALUES (@webhook_id) ON CONFLICT DO NOTHING
)
UPDATE webhooks
SET adapted_rate = NULL, adapted_ceiling = NULL, adapted_at = NULL, slowed_at = NULL
WHERE id = @webhook_id AND adapted_rate IS NOT NULL

-- name: drop_bucket
-- Webhook @webhook_id has no rate limit any more: its bucket goes, and the rate the receiver's
-- 429s adapted with it (flow control starts over at the next 429).
WITH adapted AS (
    UPDATE webhooks
    SET adapted_rate = NULL, adapted_ceiling = NULL, adapted_at = NULL, slowed_at = NULL
    WHERE id = @webhook_id AND adapted_rate IS NOT NULL
)
DELETE FROM webhook_rates WHERE webhook_id = @webhook_id

-- name: join_lanes
-- Webhook @webhook_id turned fifo: its deliveries not yet attempted (nor in flight, nor
-- tests) join their ordering lanes, in event order; the claims sort each lane out (schema.sql,
-- delivery_lanes). Deliveries already attempted carry on outside any lane.
UPDATE delivery_queue q
SET lane = joining.lane, lane_seq = joining.seq
FROM (
    SELECT o.delivery_id, o.lane, nextval('delivery_lane_seq') AS seq
    FROM (
        SELECT w.delivery_id, coalesce(e.ordering_key, '') AS lane
        FROM delivery_queue w
        JOIN events e ON e.id = w.event_id AND e.created_at = w.created_at
        WHERE w.webhook_id = @webhook_id AND w.lane IS NULL AND w.attempts = 0
          AND w.lease_owner IS NULL AND NOT w.is_test
        ORDER BY w.created_at, w.event_id
    ) o
) joining
WHERE q.delivery_id = joining.delivery_id AND q.lease_owner IS NULL

-- name: leave_lanes
-- Webhook @webhook_id is no longer fifo: its deliveries leave their lanes, and those waiting
-- in one are due at once (@now). One in flight keeps its lane until it settles (nothing waits
-- on it).
WITH released AS (
    UPDATE delivery_queue
    SET lane = NULL, lane_seq = NULL,
        due_at = CASE WHEN due_at = 'infinity' THEN @now ELSE due_at END
    WHERE webhook_id = @webhook_id AND lane IS NOT NULL AND lease_owner IS NULL
)
DELETE FROM delivery_lanes WHERE webhook_id = @webhook_id

-- name: enable
-- Make webhook @webhook_id live again, its failure clock reset.
UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
WHERE id = @webhook_id

-- name: delete
-- Mark webhook @webhook_id of workspace @workspace_id deleted at @now, unless it is already;
-- returns its id.
UPDATE webhooks SET deleted_at = @now
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL
RETURNING id

-- name: secret
-- The signing secret of webhook @webhook_id of workspace @workspace_id, unless deleted.
SELECT secret FROM webhooks
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL

-- name: rotate_secret
-- A new signing @secret for webhook @webhook_id of workspace @workspace_id, unless deleted;
-- the previous one keeps signing beside it until @expires_at. Returns its id.
UPDATE webhooks
SET previous_secret = secret, previous_secret_expires_at = @expires_at, secret = @secret
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL
RETURNING id

-- name: demo_secrets
-- The live webhooks of the demo workspace at @url, with their signing secret and, until its
-- grace ends (after @now), the previous one (the demo receiver verifies with them).
SELECT w.id, w.secret,
       CASE WHEN w.previous_secret_expires_at > @now THEN w.previous_secret END AS previous
FROM webhooks w JOIN workspaces ws ON ws.id = w.workspace_id
WHERE ws.demo AND w.url = @url AND w.deleted_at IS NULL
ORDER BY w.created_at, w.id

-- name: filter_matches
-- Whether @data passes a payload filter, as fan-out decides it (dispatcher_filter_passes):
-- webhook @webhook_id of workspace @workspace_id's saved one, or @payload_filter instead when
-- @given (NULL: none); no filter matches all. Nothing when there is no such webhook.
SELECT dispatcher_filter_passes(
           @data::jsonb,
           CASE WHEN @given::boolean THEN @payload_filter::jsonb ELSE payload_filter END,
           CASE WHEN @given::boolean THEN dispatcher_filter_arrays(@payload_filter::jsonb)
                ELSE payload_filter_arrays END,
           NULL) AS matches
FROM webhooks
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL

-- name: gone
-- Of @webhook_ids, those deleted, or not there at all (the metrics free their series).
SELECT x.id FROM unnest(@webhook_ids::text[]) AS x (id)
WHERE NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = x.id AND w.deleted_at IS NULL)

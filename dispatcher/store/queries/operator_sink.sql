-- The operator sink: an internal workspace (`workspaces.operator`) with one webhook, which
-- hears every operational event (dispatcher/store/operator_sink.py).

-- name: lock_sink
-- Serialise the set-up of the operator sink (replicas starting together), until the
-- transaction ends.
SELECT pg_advisory_xact_lock(hashtext('dispatcher-operator-sink'))

-- name: sink
-- The operator sink's workspace and its live webhook (NULL when it has none).
SELECT ws.id AS workspace_id, w.id AS webhook_id
FROM workspaces ws
LEFT JOIN webhooks w ON w.workspace_id = ws.id AND w.deleted_at IS NULL
WHERE ws.operator

-- name: insert_sink_workspace
-- The operator sink's workspace, @workspace_id its id.
INSERT INTO workspaces (id, name, operator) VALUES (@workspace_id, 'operator sink', true)

-- name: insert_sink_webhook
-- The operator sink's webhook: @id id, @workspace_id workspace, @url URL, @events event types,
-- @secret secret, at @now.
INSERT INTO webhooks (id, workspace_id, url, events, name, secret, created_at)
VALUES (@id, @workspace_id, @url, @events, 'operator sink', @secret, @now)

-- name: update_sink_webhook
-- Point the operator sink's webhook @id at URL @url with secret @secret, hearing @events, live
-- again.
UPDATE webhooks
SET url = @url, secret = @secret, previous_secret = NULL, previous_secret_expires_at = NULL,
    events = @events, disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
WHERE id = @id

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
-- The operator sink's workspace, $1 its id.
INSERT INTO workspaces (id, name, operator) VALUES ($1, 'operator sink', true)

-- name: insert_sink_webhook
-- The operator sink's webhook: $1 id, $2 workspace, $3 URL, $4 event types, $5 secret, at $6.
INSERT INTO webhooks (id, workspace_id, url, events, name, secret, created_at)
VALUES ($1, $2, $3, $4, 'operator sink', $5, $6)

-- name: update_sink_webhook
-- Point the operator sink's webhook $1 at URL $2 with secret $3, hearing $4, live again.
UPDATE webhooks
SET url = $2, secret = $3, previous_secret = NULL, previous_secret_expires_at = NULL,
    events = $4, disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
WHERE id = $1

-- Workspaces, their phone numbers and their API keys, and the fleet's shared secrets
-- (dispatcher/store/workspaces.py).

-- name: insert_workspace
-- A workspace: @id id, @name name, @demo whether it is the demo.
INSERT INTO workspaces (id, name, demo) VALUES (@id, @name, @demo)
RETURNING id, name, created_at

-- name: workspace
-- Workspace @workspace_id (the operator sink's internal workspace is nobody's to see).
SELECT id, name, created_at FROM workspaces WHERE id = @workspace_id AND NOT operator

-- name: workspaces_page
-- The workspaces (the operator sink's internal one left out: nobody's to see). Paged newest first
-- after (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, name, created_at FROM workspaces
WHERE NOT operator
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: demo_workspace
-- The demo workspace (made on the first start against an empty database), if there is one.
SELECT id FROM workspaces WHERE demo ORDER BY created_at, id LIMIT 1

-- name: insert_number
-- Number @number (E.164) of workspace @workspace_id, as @id; no row when there is no such
-- workspace, or it is the operator sink's (nobody's to change: it would route its calls into every
-- tenant's feed).
INSERT INTO phone_numbers (id, workspace_id, number)
SELECT @id, id, @number FROM workspaces WHERE id = @workspace_id AND NOT operator
RETURNING id, number, workspace_id, created_at

-- name: numbers_page
-- Workspace @workspace_id's phone numbers. Paged newest first after (@after_at, @after_id)
-- (store/pages.py: the start when none), @limit rows.
SELECT id, number, workspace_id, created_at FROM phone_numbers
WHERE workspace_id = @workspace_id
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: insert_key
-- API key @id of workspace @workspace_id: the SHA-256 of the key (@digest), its scopes (@scopes)
-- and name (@name); no row when there is no such workspace, or it is the operator sink's (a key
-- there would read every tenant's operational events and could repoint the sink); the
-- webhook its `webhooks:poll` scope is limited to (@webhook_id; NULL: none).
INSERT INTO api_keys (id, workspace_id, key_hash, scopes, name, webhook_id)
SELECT @id, id, @digest, @scopes, @name, @webhook_id FROM workspaces
WHERE id = @workspace_id AND NOT operator
RETURNING id, workspace_id, scopes, name, created_at, revoked_at, webhook_id

-- name: keys_page
-- Workspace @workspace_id's API keys, revoked ones included, without their hashes. Paged newest
-- first after (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, workspace_id, scopes, name, created_at, revoked_at, webhook_id FROM api_keys
WHERE workspace_id = @workspace_id
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: revoke_key
-- Revoke key @key_id (now, unless revoked already), when it is workspace @workspace_id's and
-- @workspace_id is not the operator sink's (any workspace's when @workspace_id is NULL: the CLI's
-- `keys revoke KEY_ID`, which can still revoke a key an older version let be made there); returns
-- its id.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @key_id
  AND (@workspace_id::text IS NULL OR workspace_id = @workspace_id
       AND NOT EXISTS (SELECT 1 FROM workspaces WHERE id = @workspace_id AND operator))
RETURNING id

-- name: live_key
-- The live key whose SHA-256 is @digest.
SELECT id, workspace_id, key_hash, scopes, webhook_id FROM api_keys
WHERE key_hash = @digest AND revoked_at IS NULL

-- name: find_numbers
-- Those of refs @refs that are numbers of workspace @workspace_id: by id, or also by E.164 form
-- when @e164.
SELECT id, number FROM phone_numbers
WHERE workspace_id = @workspace_id
  AND (id = ANY(@refs::text[]) OR (@e164 AND number = ANY(@refs::text[])))

-- name: lock_demo
-- Serialise the making of the demo workspace (replicas starting together), until the
-- transaction ends.
SELECT pg_advisory_xact_lock(hashtext('dispatcher-demo'))

-- name: any_workspace
-- Whether the database has a workspace (the operator sink's internal one does not count).
SELECT EXISTS (SELECT 1 FROM workspaces WHERE NOT operator)

-- name: offer_instance_secret
-- Store @secret as the fleet's secret named @name, unless there is one.
INSERT INTO instance_secrets (name, value) VALUES (@name, @secret) ON CONFLICT DO NOTHING

-- name: instance_secret
-- The fleet's secret named @name.
SELECT value FROM instance_secrets WHERE name = @name

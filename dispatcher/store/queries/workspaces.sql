-- Workspaces, their phone numbers and their API keys, and the fleet's shared secrets
-- (dispatcher/store/workspaces.py).

-- name: insert_workspace
-- A workspace: $1 id, $2 name, $3 whether it is the demo.
INSERT INTO workspaces (id, name, demo) VALUES ($1, $2, $3)
RETURNING id, name, created_at

-- name: workspace
-- Workspace $1 (the operator sink's internal workspace is nobody's to see).
SELECT id, name, created_at FROM workspaces WHERE id = $1 AND NOT operator

-- name: workspaces_page
-- A page of workspaces (store/pages.py adds the conditions, the order and the limit).
SELECT id, name, created_at FROM workspaces

-- name: demo_workspace
-- The demo workspace (made on the first start against an empty database), if there is one.
SELECT id FROM workspaces WHERE demo ORDER BY created_at, id LIMIT 1

-- name: insert_number
-- Number $3 (E.164) of workspace $2, as $1; no row when there is no such workspace, or it is
-- the operator sink's (nobody's to change: it would route its calls into every tenant's feed).
INSERT INTO phone_numbers (id, workspace_id, number)
SELECT $1, id, $3 FROM workspaces WHERE id = $2 AND NOT operator
RETURNING id, number, workspace_id, created_at

-- name: numbers_page
-- A page of phone numbers (store/pages.py adds the conditions, the order and the limit).
SELECT id, number, workspace_id, created_at FROM phone_numbers

-- name: insert_key
-- API key $1 of workspace $2: the SHA-256 of the key ($3), its scopes ($4) and name ($5); no
-- row when there is no such workspace, or it is the operator sink's (a key there would read
-- every tenant's operational events and could repoint the sink).
INSERT INTO api_keys (id, workspace_id, key_hash, scopes, name)
SELECT $1, id, $3, $4, $5 FROM workspaces WHERE id = $2 AND NOT operator
RETURNING id, workspace_id, scopes, name, created_at, revoked_at

-- name: keys_page
-- A page of API keys, without their hashes (store/pages.py adds the conditions, the order and
-- the limit).
SELECT id, workspace_id, scopes, name, created_at, revoked_at FROM api_keys

-- name: revoke_key
-- Revoke key $1 (now, unless revoked already), when it is workspace $2's and $2 is not the
-- operator sink's (any workspace's when $2 is NULL: the CLI's `keys revoke KEY_ID`, which
-- can still revoke a key an older version let be made there); returns its id.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1
  AND ($2::text IS NULL OR workspace_id = $2
       AND NOT EXISTS (SELECT 1 FROM workspaces WHERE id = $2 AND operator))
RETURNING id

-- name: live_key
-- The live key whose SHA-256 is $1.
SELECT id, workspace_id, key_hash, scopes FROM api_keys
WHERE key_hash = $1 AND revoked_at IS NULL

-- name: find_numbers
-- Those of refs $2 that are numbers of workspace $1: by id, or also by E.164 form when $3.
SELECT id, number FROM phone_numbers
WHERE workspace_id = $1 AND (id = ANY($2::text[]) OR ($3 AND number = ANY($2::text[])))

-- name: lock_demo
-- Serialise the making of the demo workspace (replicas starting together), until the
-- transaction ends.
SELECT pg_advisory_xact_lock(hashtext('dispatcher-demo'))

-- name: any_workspace
-- Whether the database has a workspace (the operator sink's internal one does not count).
SELECT EXISTS (SELECT 1 FROM workspaces WHERE NOT operator)

-- name: offer_instance_secret
-- Store $2 as the fleet's secret named $1, unless there is one.
INSERT INTO instance_secrets (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING

-- name: instance_secret
-- The fleet's secret named $1.
SELECT value FROM instance_secrets WHERE name = $1

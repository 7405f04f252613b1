-- Portal sessions (dispatcher/store/portal.py, docs/console.md "Portal sessions").

-- name: insert_session
-- Session @id of workspace @workspace_id: its @capabilities, @parent_origin (or NULL), the
-- SHA-256 of its one-time secret (@secret_hash), made at @now, ending at @expires_at; no row when
-- there is no such workspace, or it is the operator sink's.
INSERT INTO portal_sessions
    (id, workspace_id, capabilities, parent_origin, secret_hash, created_at, expires_at)
SELECT @id, id, @capabilities, @parent_origin, @secret_hash, @now, @expires_at
FROM workspaces WHERE id = @workspace_id AND NOT operator
RETURNING id, workspace_id, capabilities, parent_origin, created_at, expires_at

-- name: exchange
-- Exchange the secret whose SHA-256 is @secret_hash for the credential whose SHA-256 is
-- @token_hash, once: only while the session is live at @now and was never exchanged.
UPDATE portal_sessions SET token_hash = @token_hash, exchanged_at = @now
WHERE secret_hash = @secret_hash AND exchanged_at IS NULL AND deleted_at IS NULL
  AND expires_at > @now
RETURNING id, workspace_id, capabilities, parent_origin, created_at, expires_at

-- name: live_token
-- The session whose credential's SHA-256 is @token_hash, when it is live at @now.
SELECT id, workspace_id, capabilities, token_hash FROM portal_sessions
WHERE token_hash = @token_hash AND deleted_at IS NULL AND expires_at > @now

-- name: framing
-- The origin that may frame session @id's console, while it is live at @now.
SELECT parent_origin FROM portal_sessions
WHERE id = @id AND deleted_at IS NULL AND expires_at > @now

-- name: delete_session
-- End session @id of workspace @workspace_id (now, unless ended already); returns its id.
UPDATE portal_sessions SET deleted_at = coalesce(deleted_at, @now)
WHERE id = @id AND workspace_id = @workspace_id
RETURNING id

-- name: forget_ended
-- Delete the sessions that ended before @before (the maintenance loop, with retention). Every
-- session ends by its expiry at the latest (a delete ends it sooner), so `expires_at` alone
-- decides.
DELETE FROM portal_sessions WHERE expires_at < @before

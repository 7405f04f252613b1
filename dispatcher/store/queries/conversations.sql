-- Conversation threads: one per (workspace number, contact) (dispatcher/store/conversations.py).
-- A thread is made or updated by the statement that writes its item (messages.sql).

-- name: conversation
-- Conversation @conversation_id of workspace @workspace_id.
SELECT id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind
FROM conversations
WHERE workspace_id = @workspace_id AND id = @conversation_id

-- name: set_status
-- Move conversation @conversation_id of workspace @workspace_id to folder @status; returns it.
UPDATE conversations SET status = @status
WHERE workspace_id = @workspace_id AND id = @conversation_id
RETURNING id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind

-- name: conversations_page
-- Workspace @workspace_id's conversations, with status @status and on number @number_id (NULL:
-- any). Paged newest first after (@after_at, @after_id) (store/pages.py: the start when none),
-- @limit rows.
SELECT id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind
FROM conversations
WHERE workspace_id = @workspace_id
  AND (@status::text IS NULL OR status = @status)
  AND (@number_id::text IS NULL OR number_id = @number_id)
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- Conversation threads: one per (workspace number, contact) (dispatcher/store/conversations.py).

-- name: touch
-- Create the thread if absent and record its latest item; returns its id. New threads start
-- `open`; an incoming item ($7) reopens a `done` thread (an inbox), an outgoing one leaves the
-- folder alone. $1 new id, $2 workspace, $3 number id, $4 contact, $5 time, $6 kind,
-- $7 incoming. The first step (the CTE `conversation`) of the statement that writes the
-- thread's item: messages.sql's `create_` statements (messages.py joins them).
INSERT INTO conversations
    (id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind)
VALUES ($1, $2, $3, $4, 'open', $5, $5, $6)
ON CONFLICT (number_id, contact) DO UPDATE SET
    last_item_at = greatest(conversations.last_item_at, EXCLUDED.last_item_at),
    last_item_kind = EXCLUDED.last_item_kind,
    status = CASE WHEN $7::boolean THEN 'open' ELSE conversations.status END
RETURNING id

-- name: conversation
-- Conversation $2 of workspace $1.
SELECT id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind
FROM conversations
WHERE workspace_id = $1 AND id = $2

-- name: set_status
-- Move conversation $2 of workspace $1 to folder $3; returns it.
UPDATE conversations SET status = $3
WHERE workspace_id = $1 AND id = $2
RETURNING id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind

-- name: conversations_page
-- A page of conversations (store/pages.py adds the conditions, the order and the limit).
SELECT id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind
FROM conversations

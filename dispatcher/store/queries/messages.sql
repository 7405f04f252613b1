-- Messages and call records (dispatcher/store/messages.py). Each is written with its
-- conversation's update in one statement (the three `create_` statements: the thread's upsert
-- is dispatcher_touch_conversation, functions.sql, which answers the thread's id), then its
-- event in the same transaction.

-- name: create_outgoing
-- An outgoing message @id from @from_number to @contact (the recipient), with its
-- conversation's update (made as @conversation_id when new), queued for the carrier at
-- @carrier_due_at; @idempotency_key is the Idempotency-Key it was sent under and @fingerprint
-- the request's fingerprint (NULL: none).
INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction, from_number,
                      to_number, text, media, status, created_at, updated_at, carrier_due_at,
                      idempotency_key, request_fingerprint)
VALUES (@id, @workspace_id, @number_id,
        dispatcher_touch_conversation(@conversation_id, @workspace_id, @number_id, @contact,
                                      @now, @kind, @incoming),
        'outgoing', @from_number, @contact, @text, '[]', 'queued', @now, @now, @carrier_due_at,
        @idempotency_key, @fingerprint)
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

-- name: create_incoming
-- A received message @id from @contact (the sender) to @to_number, with its conversation's
-- update (made as @conversation_id when new).
INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction, from_number,
                      to_number, text, media, status, created_at, updated_at)
VALUES (@id, @workspace_id, @number_id,
        dispatcher_touch_conversation(@conversation_id, @workspace_id, @number_id, @contact,
                                      @now, @kind, @incoming),
        'incoming', @contact, @to_number, @text, @media, 'received', @now, @now)
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

-- name: create_call
-- A call record @id, with its conversation's update (made as @conversation_id when new; the
-- contact is the other party); @duration_seconds may be NULL.
INSERT INTO calls (id, workspace_id, number_id, conversation_id, direction, from_number,
                   to_number, status, duration_seconds, created_at)
VALUES (@id, @workspace_id, @number_id,
        dispatcher_touch_conversation(@conversation_id, @workspace_id, @number_id, @contact,
                                      @now, @kind, @incoming),
        @direction, @from_number, @to_number, @status, @duration_seconds, @now)
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number,
          status, duration_seconds, created_at

-- name: lock_idempotency_key
-- Serialise the sends of workspace @workspace_id under key @idempotency_key, until the transaction
-- ends (a lock of its own: events.sql's lock for the same key is another one).
SELECT pg_advisory_xact_lock(hashtext('message:' || @workspace_id || ':' || @idempotency_key))

-- name: find_idempotent_message
-- The id and request fingerprint of the latest message of workspace @workspace_id sent under key
-- @idempotency_key since @since (the idempotency window), if any.
SELECT id, request_fingerprint
FROM messages
WHERE workspace_id = @workspace_id AND idempotency_key = @idempotency_key AND created_at > @since
ORDER BY created_at DESC
LIMIT 1

-- name: message
-- Message @message_id of workspace @workspace_id.
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages
WHERE workspace_id = @workspace_id AND id = @message_id

-- name: messages_page
-- Workspace @workspace_id's messages on number @number_id, with contact @contact (the other end:
-- `to` for outgoing, `from` for incoming), in direction @direction (each NULL: any). Paged newest
-- first after (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages
WHERE workspace_id = @workspace_id
  AND (@number_id::text IS NULL OR number_id = @number_id)
  AND (@contact::text IS NULL
       OR CASE WHEN direction = 'outgoing' THEN to_number ELSE from_number END = @contact)
  AND (@direction::text IS NULL OR direction = @direction)
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: claim_carrier_due
-- Up to @limit outgoing messages the carrier should move along at @now, locked (others skip them).
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages
WHERE status IN ('queued', 'sent') AND carrier_due_at <= @now
ORDER BY carrier_due_at
LIMIT @limit
FOR UPDATE SKIP LOCKED

-- name: move_statuses
-- Apply a batch of carrier steps (the arrays @message_ids message ids, @statuses new statuses,
-- @due_at when each is next due, NULL: never) at @now; returns the messages as they are now.
UPDATE messages
SET status = move.new_status, updated_at = @now, carrier_due_at = move.due_at
FROM unnest(@message_ids::text[], @statuses::text[], @due_at::timestamptz[])
     AS move (message_id, new_status, due_at)
WHERE messages.id = move.message_id
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

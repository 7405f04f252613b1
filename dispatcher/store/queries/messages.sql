-- Messages and call records (dispatcher/store/messages.py). Each is written with its
-- conversation's update in one statement (the three `create_` statements follow
-- conversations.sql's `touch`), then its event in the same transaction.

-- name: create_outgoing
-- An outgoing message, after conversations.sql's `touch` (parameters $1 to $7, the contact $4
-- being the recipient) as the CTE `conversation` (messages.py joins them): queued for the
-- carrier at $11. $8 id, $9 from, $10 text; $12 the Idempotency-Key it was sent under and $13
-- the request's fingerprint (NULL: none).
INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction, from_number,
                      to_number, text, media, status, created_at, updated_at, carrier_due_at,
                      idempotency_key, request_fingerprint)
SELECT $8, $2, $3, conversation.id, 'outgoing', $9, $4, $10, '[]', 'queued', $5, $5, $11,
       $12, $13
FROM conversation
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

-- name: create_incoming
-- A received message, after conversations.sql's `touch` (parameters $1 to $7, the contact $4
-- being the sender) as the CTE `conversation`: $8 id, $9 to, $10 text, $11 media.
INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction, from_number,
                      to_number, text, media, status, created_at, updated_at)
SELECT $8, $2, $3, conversation.id, 'incoming', $4, $9, $10, $11, 'received', $5, $5
FROM conversation
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

-- name: create_call
-- A call record, after conversations.sql's `touch` (parameters $1 to $7) as the CTE
-- `conversation`: $8 id, $9 direction, $10 from, $11 to, $12 status, $13 duration in seconds.
INSERT INTO calls (id, workspace_id, number_id, conversation_id, direction, from_number,
                   to_number, status, duration_seconds, created_at)
SELECT $8, $2, $3, conversation.id, $9, $10, $11, $12, $13, $5
FROM conversation
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number,
          status, duration_seconds, created_at

-- name: lock_idempotency_key
-- Serialise the sends of workspace $1 under key $2, until the transaction ends (a lock of its
-- own: events.sql's lock for the same key is another one).
SELECT pg_advisory_xact_lock(hashtext('message:' || $1 || ':' || $2))

-- name: find_idempotent_message
-- The id and request fingerprint of the latest message of workspace $1 sent under key $2
-- since $3 (the idempotency window), if any.
SELECT id, request_fingerprint
FROM messages
WHERE workspace_id = $1 AND idempotency_key = $2 AND created_at > $3
ORDER BY created_at DESC
LIMIT 1

-- name: message
-- Message $2 of workspace $1.
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages
WHERE workspace_id = $1 AND id = $2

-- name: messages_page
-- A page of messages (store/pages.py adds the conditions, the order and the limit).
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages

-- name: claim_carrier_due
-- Up to $2 outgoing messages the carrier should move along at $1, locked (others skip them).
SELECT id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
       media, status, created_at, expunged_at IS NOT NULL AS expunged
FROM messages
WHERE status IN ('queued', 'sent') AND carrier_due_at <= $1
ORDER BY carrier_due_at
LIMIT $2
FOR UPDATE SKIP LOCKED

-- name: move_statuses
-- Apply a batch of carrier steps (the arrays $1 message ids, $2 new statuses, $3 when each is
-- next due, NULL: never) at $4; returns the messages as they are now.
UPDATE messages
SET status = move.new_status, updated_at = $4, carrier_due_at = move.due_at
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS move (message_id, new_status, due_at)
WHERE messages.id = move.message_id
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

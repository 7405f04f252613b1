-- Events, as the service publishes them (dispatcher/store/events.py). Every door ends in
-- schema.sql's dispatcher_append_event, the one writer of `events`: it builds the envelope,
-- stores the event and fans it out, so these statements only call it.

-- name: append_event
-- Publish one event: $1 id, $2 workspace, $3 type, $4 number id, $5 source, $6 data (JSON
-- text), $7 created at, $8 idempotency key, $9 request fingerprint, $10 webhooks to deliver
-- to instead of the subscribers (a test), $11 trace context, $12 a subscriber left out (the
-- one an operational event is about), $13 ordering key. One row: (payload, fanned).
SELECT dispatcher_append_event($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)

-- name: append_events
-- Publish a batch of events (one per element of the arrays $1 ids, $2 workspaces, $3 types,
-- $4 number ids, $5 data, $8 idempotency keys, $9 request fingerprints, $11 subscribers left
-- out, $12 ordering keys), from $6 source at $7, each with trace context $10. One row per
-- event, in the arrays' order: (event_id, event_payload, event_fanned).
SELECT event_id, event_payload, event_fanned
FROM dispatcher_append_events($1::text[], $2::text[], $3::text[], $4::text[], $6, $5::json[],
                              $7, $8::text[], $9::bytea[], $10, $11::text[], $12::text[])

-- name: lock_idempotency_key
-- Serialise the publishes of one workspace under one key ($1 workspace, $2 key), until the
-- transaction ends.
SELECT pg_advisory_xact_lock(hashtext($1 || ':' || $2))

-- name: lock_idempotency_keys
-- lock_idempotency_key for each of the keys $2 of workspace $1 (the same locks, so a batch and
-- a single publish under one key are serialised too), taken in one order whoever asks, so
-- that two batches sharing keys never wait for each other in a circle.
SELECT pg_advisory_xact_lock(lock_id)
FROM (SELECT DISTINCT hashtext($1 || ':' || key) AS lock_id
      FROM unnest($2::text[]) AS key
      ORDER BY lock_id) AS keys

-- name: find_idempotent_event
-- The payload and request fingerprint of the latest event of workspace $1 published under
-- key $2 since $3 (the idempotency window), if any.
SELECT payload, request_fingerprint
FROM events
WHERE workspace_id = $1 AND idempotency_key = $2 AND created_at > $3
ORDER BY created_at DESC
LIMIT 1

-- name: find_idempotent_events
-- find_idempotent_event for each of the keys $2: per key, the latest event of workspace $1
-- published under it since $3, with the key.
SELECT DISTINCT ON (idempotency_key) idempotency_key, payload, request_fingerprint
FROM events
WHERE workspace_id = $1 AND idempotency_key = ANY ($2::text[]) AND created_at > $3
ORDER BY idempotency_key, created_at DESC

-- name: events_page
-- A page of a workspace's events (store/pages.py adds the conditions, test events left out,
-- the order and the limit).
SELECT id, type, payload, created_at, expunged_at IS NOT NULL AS expunged,
       ordering_key FROM events

-- name: event
-- Event $2 of workspace $1; a test event is not part of the workspace's stream.
SELECT id, type, payload, created_at, expunged_at IS NOT NULL AS expunged,
       ordering_key FROM events
WHERE workspace_id = $1 AND id = $2 AND type <> 'webhook.test'

-- name: stored_payloads
-- The id and payload of each of the events $1 that is stored: after a write whose commit lost
-- its answer, whether it was kept (store/events.py, `_settle`).
SELECT id, payload FROM events WHERE id = ANY ($1::text[])

-- Events, as the service publishes them (dispatcher/store/events.py). Every door ends in
-- functions.sql's dispatcher_append_event, the one writer of `events`: it builds the envelope,
-- stores the event and fans it out, so these statements only call it.

-- name: append_event
-- Publish one event @id (its @data as JSON text) in @workspace_id, of @type, from @source, at
-- @created_at; @number_id, @idempotency_key and the request's @fingerprint when it has them;
-- @test_webhooks: the webhooks to deliver to instead of the subscribers (a test); @traceparent:
-- the trace context; @left_out: a subscriber left out (the one an operational event is about);
-- @ordering_key: its ordering lane's key. One row: (payload, fanned).
SELECT dispatcher_append_event(@id, @workspace_id, @type, @number_id, @source, @data, @created_at,
                               @idempotency_key, @fingerprint, @test_webhooks, @traceparent,
                               @left_out, @ordering_key)

-- name: append_events
-- Publish a batch of events, one per element of the arrays (@ids, @workspace_ids, @types,
-- @number_ids, @data, @idempotency_keys, @fingerprints, the subscribers @left_out, the
-- @ordering_keys), from @source at @created_at, each with trace context @traceparent. One row
-- per event, in the arrays' order: (event_id, event_payload, event_fanned).
SELECT event_id, event_payload, event_fanned
FROM dispatcher_append_events(@ids::text[], @workspace_ids::text[], @types::text[],
                              @number_ids::text[], @source, @data::json[], @created_at,
                              @idempotency_keys::text[], @fingerprints::bytea[], @traceparent,
                              @left_out::text[], @ordering_keys::text[])

-- name: lock_idempotency_key
-- Serialise the publishes of one workspace under one key (@workspace_id workspace, @idempotency_key
-- key), until the transaction ends.
SELECT pg_advisory_xact_lock(hashtext(@workspace_id || ':' || @idempotency_key))

-- name: lock_idempotency_keys
-- lock_idempotency_key for each of the keys @keys of workspace @workspace_id (the same locks, so a
-- batch and a single publish under one key are serialised too), taken in one order whoever asks, so
-- that two batches sharing keys never wait for each other in a circle.
SELECT pg_advisory_xact_lock(lock_id)
FROM (SELECT DISTINCT hashtext(@workspace_id || ':' || key) AS lock_id
      FROM unnest(@keys::text[]) AS key
      ORDER BY lock_id) AS keys

-- name: find_idempotent_event
-- The payload and request fingerprint of the latest event of workspace @workspace_id published
-- under key @idempotency_key since @since (the idempotency window), if any.
SELECT payload, request_fingerprint
FROM events
WHERE workspace_id = @workspace_id AND idempotency_key = @idempotency_key AND created_at > @since
ORDER BY created_at DESC
LIMIT 1

-- name: find_idempotent_events
-- find_idempotent_event for each of the keys @keys: per key, the latest event of workspace
-- @workspace_id published under it since @since, with the key.
SELECT DISTINCT ON (idempotency_key) idempotency_key, payload, request_fingerprint
FROM events
WHERE workspace_id = @workspace_id AND idempotency_key = ANY (@keys::text[]) AND created_at > @since
ORDER BY idempotency_key, created_at DESC

-- name: events_page
-- Workspace @workspace_id's events of type @event_type (NULL: any), test events left out, created
-- from @since until @until (store/pages.py: open ends as -infinity, infinity). Paged newest first
-- after (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, type, payload, created_at, expunged_at IS NOT NULL AS expunged, ordering_key
FROM events
WHERE workspace_id = @workspace_id AND type <> 'webhook.test'
  AND (@event_type::text IS NULL OR type = @event_type)
  AND created_at >= @since AND created_at < @until
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: event
-- Event @event_id of workspace @workspace_id; a test event is not part of the workspace's stream.
SELECT id, type, payload, created_at, expunged_at IS NOT NULL AS expunged,
       ordering_key FROM events
WHERE workspace_id = @workspace_id AND id = @event_id AND type <> 'webhook.test'

-- name: stored_payloads
-- The id and payload of each of the events @event_ids that is stored: after a write whose commit
-- lost its answer, whether it was kept (store/events.py, `_settle`).
SELECT id, payload FROM events WHERE id = ANY (@event_ids::text[])

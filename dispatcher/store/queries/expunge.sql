-- Removing content (dispatcher/store/expunge.py; docs/events.md, "Removing content"): an
-- event's content, or a message's text, erased for good.

-- name: lock_content_to_expunge
-- Hold off, until the transaction ends, every retry and recover of workspace @workspace_id (they
-- hold lock_content_to_resend): an expunge then sees every queued delivery it must give up, and
-- they see the expunge.
SELECT pg_advisory_xact_lock(hashtext('dispatcher_expunge'), hashtext(@workspace_id))

-- name: lock_content_to_resend
-- Wait for an expunge in workspace @workspace_id to end, and hold the next off until the
-- transaction ends (retries and recovers share it among themselves).
SELECT pg_advisory_xact_lock_shared(hashtext('dispatcher_expunge'), hashtext(@workspace_id))

-- name: erase_event
-- Erase event @event_id of workspace @workspace_id (not a test event): its payload becomes its
-- envelope with `"data":null`, which is all an attempt could send from now on; its request
-- fingerprint goes (a replay under its Idempotency-Key then answers the erased envelope whatever
-- the request, confirming no guess of the data), and its ordering key (every delivery still in a
-- lane holds a copy: delivery_queue.lane); expunged at @now unless it was already. Returns it as
-- events.sql's `event` does.
UPDATE events
SET payload = dispatcher_envelope(id, type, created_at, 'null'::json),
    request_fingerprint = NULL,
    ordering_key = NULL,
    expunged_at = coalesce(expunged_at, @now)
WHERE workspace_id = @workspace_id AND id = @event_id AND type <> 'webhook.test'
RETURNING id, type, payload, created_at, expunged_at IS NOT NULL AS expunged, ordering_key

-- name: event_delivery_ids
-- The ids of the deliveries of event @event_id (created at @created_at: one partition) in workspace
-- @workspace_id, as deliveries.sql's event_deliveries_page finds them (one key probe per webhook).
SELECT x.id
FROM webhooks w
CROSS JOIN LATERAL (
    SELECT one.id FROM deliveries one
    WHERE one.webhook_id = w.id AND one.event_id = @event_id AND one.created_at = @created_at
) x
WHERE w.workspace_id = @workspace_id

-- name: lock_queued_deliveries
-- Lock the queue rows of deliveries @delivery_ids (those still pending), in id order as the
-- engine's record does; returns each with whether it is in flight (leased).
SELECT delivery_id, lease_owner IS NOT NULL AS in_flight
FROM delivery_queue
WHERE delivery_id = ANY(@delivery_ids::text[])
ORDER BY delivery_id
FOR UPDATE

-- name: give_up_expunged
-- Of the queued deliveries @given_up of an expunged event: those in flight are marked, for their
-- attempt's record and for a claim of a lease handed back; the others leave the queue and
-- are settled `failed`, `expunged`.
WITH marked AS (
    UPDATE delivery_queue SET expunged = true
    WHERE delivery_id = ANY(@given_up::text[]) AND lease_owner IS NOT NULL
), gone AS (
    DELETE FROM delivery_queue
    WHERE delivery_id = ANY(@given_up::text[]) AND lease_owner IS NULL
    RETURNING delivery_id, created_at
)
UPDATE deliveries d
SET status = 'failed', last_error = 'expunged', next_attempt_at = NULL
FROM gone
WHERE d.id = gone.delivery_id AND d.created_at = gone.created_at

-- name: advance_lanes
-- The ordering lanes whose head was among the deliveries @given_up just given up get their next
-- head, due at @now (functions.sql, dispatcher_advance_lanes; after the queue rows, as the
-- engine's record does).
SELECT dispatcher_advance_lanes(@given_up::text[], @now)

-- name: erase_response_excerpts
-- Erase the response excerpts of every attempt of deliveries @delivery_ids (created at
-- @created_at).
UPDATE delivery_attempts SET response_body = NULL
WHERE delivery_id = ANY(@delivery_ids::text[]) AND delivery_created_at = @created_at
  AND response_body IS NOT NULL

-- name: erase_message_text
-- Erase the text of message @message_id of workspace @workspace_id, and its request fingerprint (as
-- an event's), expunged at @now unless it was already; returns it as messages.sql's `message` does.
UPDATE messages
SET text = NULL, request_fingerprint = NULL, expunged_at = coalesce(expunged_at, @now)
WHERE workspace_id = @workspace_id AND id = @message_id
RETURNING id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text,
          media, status, created_at, expunged_at IS NOT NULL AS expunged

-- name: events_carrying
-- The events of workspace @workspace_id created at or after @created_at (the message's own time)
-- whose data is message @message_id, of the types @message_events that carry a message, unless
-- expunged (their data is gone already): their id, created_at and payload. Walks events_window from
-- the message's time; the substring test spares the JSON parse of the others.
SELECT id, created_at, payload FROM events
WHERE workspace_id = @workspace_id AND created_at >= @created_at
  AND type = ANY(@message_events::text[])
  AND expunged_at IS NULL
  AND strpos(payload, @message_id) > 0
  AND payload::json -> 'data' ->> 'id' = @message_id

-- name: rewrite_event_data
-- Give events @event_ids (created at @created_at) the data @data (JSON text, one per event) in
-- their envelopes, unless expunged meanwhile (an expunge's `"data":null` is never undone); a
-- fingerprint of the request that published one (it held the text) goes with it.
UPDATE events e
SET payload = dispatcher_envelope(e.id, e.type, e.created_at, new.data),
    request_fingerprint = NULL
FROM unnest(@event_ids::text[], @created_at::timestamptz[], @data::json[])
     AS new (id, created_at, data)
WHERE e.id = new.id AND e.created_at = new.created_at AND e.expunged_at IS NULL

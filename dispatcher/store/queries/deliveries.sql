-- Deliveries as the API sees them: read, list, test, retry, recover (dispatcher/store/
-- deliveries.py). New deliveries are made by functions.sql's dispatcher_add_deliveries alone, with
-- their rows in the engine's queue; the engine's own statements are in queries/queue.sql.

-- name: deliveries_page
-- Webhook @webhook_id's deliveries (of workspace @workspace_id) with their events' payloads: with
-- status @status, of event type @event_type, of event @event_id (each NULL: any), created from
-- @since until @until (store/pages.py: open ends as -infinity, infinity). Paged newest first after
-- (@after_at, @after_id) (store/pages.py: the start when none), @limit rows.
SELECT d.id, d.webhook_id, d.attempts, d.created_at, d.delivered_at, d.event_type,
       d.last_error, d.next_attempt_at, d.response_ms, d.response_status, d.status,
       e.payload, e.expunged_at IS NOT NULL AS expunged
FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
WHERE d.workspace_id = @workspace_id AND d.webhook_id = @webhook_id
  AND (@status::text IS NULL OR d.status = @status)
  AND (@event_type::text IS NULL OR d.event_type = @event_type)
  AND (@event_id::text IS NULL OR d.event_id = @event_id)
  AND d.created_at >= @since AND d.created_at < @until
  AND (d.created_at, d.id) < (@after_at, @after_id)
ORDER BY d.created_at DESC, d.id DESC
LIMIT @limit

-- name: delivery
-- One delivery of workspace @workspace_id's webhook @webhook_id, by id (@delivery_id), with its
-- event's payload.
SELECT d.id, d.webhook_id, d.attempts, d.created_at, d.delivered_at, d.event_type,
       d.last_error, d.next_attempt_at, d.response_ms, d.response_status, d.status,
       e.payload, e.expunged_at IS NOT NULL AS expunged
FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
WHERE d.workspace_id = @workspace_id AND d.webhook_id = @webhook_id AND d.id = @delivery_id

-- name: event_delivery
-- Webhook @webhook_id's delivery of event @event_id (created at @now: one partition), with the
-- event's payload.
SELECT d.id, d.webhook_id, d.attempts, d.created_at, d.delivered_at, d.event_type,
       d.last_error, d.next_attempt_at, d.response_ms, d.response_status, d.status,
       e.payload, e.expunged_at IS NOT NULL AS expunged
FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
WHERE d.webhook_id = @webhook_id AND d.event_id = @event_id AND d.created_at = @now

-- name: lock_delivery
-- Lock delivery @delivery_id of workspace @workspace_id's webhook @webhook_id (it orders the
-- retries of a delivery no longer queued; taken after the queue row's lock, as every writer of both
-- takes them); returns its id and whether its event was expunged, or nothing when there is no such
-- delivery.
SELECT d.id, e.expunged_at IS NOT NULL AS expunged
FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
WHERE d.workspace_id = @workspace_id AND d.webhook_id = @webhook_id AND d.id = @delivery_id
FOR UPDATE OF d

-- name: lock_queued
-- Lock delivery @delivery_id's row in the engine's queue, if it has one (it orders a retry against
-- the claims, which skip locked rows); returns who holds its lease (NULL: nobody).
SELECT lease_owner FROM delivery_queue WHERE delivery_id = @delivery_id FOR UPDATE

-- name: lock_queued_now
-- Lock delivery @delivery_id's row in the engine's queue, if it has one, without waiting (a retry
-- that found no queue row looks again once it holds the history row: another retry or a recover may
-- have queued the delivery meanwhile; waiting for that row while holding the history row would
-- invert the lock order). Raises lock_not_available (55P03) when another transaction holds it.
SELECT lease_owner FROM delivery_queue WHERE delivery_id = @delivery_id FOR UPDATE NOWAIT

-- name: make_pending
-- Make delivery @delivery_id pending again, due at @due_at (a retry, whatever its status).
UPDATE deliveries SET status = 'pending', next_attempt_at = @due_at, delivered_at = NULL
WHERE id = @delivery_id

-- name: make_due
-- Move queued delivery @delivery_id to be due at @due_at, because of @trigger (the attempt log's
-- trigger). One waiting in its ordering lane (parked) keeps waiting for the deliveries ahead of it.
UPDATE delivery_queue
SET due_at = CASE WHEN lane IS NOT NULL AND due_at = 'infinity' THEN due_at ELSE @due_at END,
    trigger = @trigger
WHERE delivery_id = @delivery_id

-- name: requeue_failed
-- Make webhook @webhook_id's failed deliveries created in [@since, @until) pending again, due at
-- @now, those of events its payload filter passes (dispatcher_filter_passes, as fan-out decides it;
-- test deliveries are never filtered), expunged events excepted; returns their ids.
UPDATE deliveries d SET status = 'pending', next_attempt_at = @now
FROM webhooks w
WHERE w.id = @webhook_id AND d.webhook_id = w.id
  AND d.status = 'failed' AND d.created_at >= @since AND d.created_at < @until
  AND NOT EXISTS (
      SELECT 1 FROM events e
      WHERE e.id = d.event_id AND e.created_at = d.created_at AND e.expunged_at IS NOT NULL
  )
  AND (w.payload_filter IS NULL OR d.event_type = 'webhook.test' OR EXISTS (
      SELECT 1 FROM events e
      WHERE e.id = d.event_id AND e.created_at = d.created_at
        AND dispatcher_filter_passes(e.payload::jsonb -> 'data', w.payload_filter,
                                     w.payload_filter_arrays, NULL)
  ))
RETURNING d.id

-- name: enqueue
-- Give the pending deliveries among @delivery_ids (made pending again: a retry, a recover) their
-- rows in the engine's queue, due when the history says, because of @trigger (the attempt log's
-- trigger); one queued already is left as it is. A fifo subscription's (not a test's) goes to the
-- end of its ordering lane, in event order.
INSERT INTO delivery_queue (delivery_id, created_at, webhook_id, event_id, is_test, due_at,
                            attempts, trigger, lane, lane_seq)
SELECT o.id, o.created_at, o.webhook_id, o.event_id, o.is_test, o.next_attempt_at,
       o.attempts, @trigger, o.lane,
       CASE WHEN o.lane IS NOT NULL THEN nextval('delivery_lane_seq') END
FROM (
    SELECT d.id, d.created_at, d.webhook_id, d.event_id, d.event_type = 'webhook.test' AS is_test,
           d.next_attempt_at, d.attempts,
           CASE WHEN w.ordering = 'fifo' AND d.event_type <> 'webhook.test'
                THEN coalesce(e.ordering_key, '') END AS lane
    FROM deliveries d
    JOIN webhooks w ON w.id = d.webhook_id
    JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
    WHERE d.id = ANY(@delivery_ids::text[]) AND d.status = 'pending'
    ORDER BY d.created_at, d.event_id
) o
ON CONFLICT (delivery_id) DO NOTHING

-- name: deliver_missed
-- Deliveries for the events of workspace @workspace_id created in [@since, @until) that webhook
-- @webhook_id hears (type, number and payload filter: dispatcher_filter_passes, as fan-out decides
-- them) and has no delivery of, due at @now, because of @trigger, expunged events excepted; returns
-- how many were made. (Only the missed ones reach dispatcher_add_deliveries, which would skip the
-- others too.) Made in event order: a fifo subscription's join the end of their lanes in that
-- order.
SELECT coalesce(sum(dispatcher_add_deliveries(m.id, m.created_at, m.workspace_id, m.type,
                                              m.number_id, ARRAY[m.webhook_id], @now, @trigger,
                                              NULL)),
                0)::int
FROM (
    SELECT e.id, e.created_at, e.workspace_id, e.type, e.number_id, w.id AS webhook_id
    FROM webhooks w
    JOIN events e ON e.workspace_id = w.workspace_id
    WHERE w.id = @webhook_id AND w.workspace_id = @workspace_id
      AND e.created_at >= @since AND e.created_at < @until
      AND e.expunged_at IS NULL
      AND e.type = ANY (w.events)
      AND (w.number_ids IS NULL OR e.number_id = ANY (w.number_ids))
      AND (w.payload_filter IS NULL
           OR dispatcher_filter_passes(e.payload::jsonb -> 'data', w.payload_filter,
                                       w.payload_filter_arrays, NULL))
      AND NOT EXISTS (
          SELECT 1 FROM deliveries d
          WHERE d.webhook_id = w.id AND d.event_id = e.id AND d.created_at = e.created_at
      )
    ORDER BY e.created_at, e.id
) m

-- name: event_deliveries_page
-- A page of the deliveries of event @event_id (created at @created_at: one partition) in workspace
-- @workspace_id, deleted webhooks' included: one probe of the (webhook, event, created_at) key per
-- webhook of the workspace. Paged newest first after (@after_at, @after_id) (store/pages.py: the
-- start when none), @limit rows.
SELECT d.* FROM (
    SELECT x.id, x.webhook_id, x.attempts, x.created_at, x.delivered_at, x.event_type,
           x.last_error, x.next_attempt_at, x.response_ms, x.response_status, x.status,
           e.payload, e.expunged_at IS NOT NULL AS expunged
    FROM webhooks w
    CROSS JOIN LATERAL (
        SELECT * FROM deliveries one
        WHERE one.webhook_id = w.id AND one.event_id = @event_id AND one.created_at = @created_at
    ) x
    JOIN events e ON e.id = x.event_id AND e.created_at = x.created_at
    WHERE w.workspace_id = @workspace_id
) d
WHERE (d.created_at, d.id) < (@after_at, @after_id)
ORDER BY d.created_at DESC, d.id DESC
LIMIT @limit

-- name: event_delivery_count
-- How many deliveries event @event_id (created at @event_created_at) has in workspace
-- @workspace_id, as event_deliveries_page finds them.
SELECT count(*) FROM webhooks w
CROSS JOIN LATERAL (
    SELECT 1 FROM deliveries one
    WHERE one.webhook_id = w.id AND one.event_id = @event_id AND one.created_at = @event_created_at
) x
WHERE w.workspace_id = @workspace_id

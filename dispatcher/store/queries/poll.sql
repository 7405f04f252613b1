-- Pull delivery: a poll webhook's events, read by its polls (dispatcher/store/poll.py,
-- docs/webhooks.md "Poll mode").

-- name: poll_webhook
-- Webhook @webhook_id of workspace @workspace_id, unless deleted: its mode and whether it is
-- disabled.
SELECT mode, disabled_at IS NOT NULL AS disabled FROM webhooks
WHERE workspace_id = @workspace_id AND id = @webhook_id AND deleted_at IS NULL

-- name: horizon
-- Where polls stand (dispatcher_poll_horizon: every older transaction has ended): where a
-- consumer that starts now starts.
SELECT dispatcher_poll_horizon()::text

-- name: poll
-- The next @limit events of workspace @workspace_id that webhook @webhook_id hears, after
-- position (@txid, @event_id) in (txid, id) order, created at or after @since (NULL: any):
-- only events of transactions older than every one of this database still running
-- (dispatcher_poll_horizon, read from this statement's own snapshot, so each of them is
-- visible to it), so that an event committed late is never behind a position handed out. What the webhook hears is fan-out's rule:
-- dispatcher_hears (types and numbers) and dispatcher_filter_passes (the payload filter,
-- with fan-out's 5 s deadline). One row with NULL event columns when there is none; every
-- row carries the horizon.
WITH horizon AS MATERIALIZED (
    SELECT dispatcher_poll_horizon() AS xmin,
           clock_timestamp() + interval '5 seconds' AS deadline
), hook AS MATERIALIZED (
    SELECT events, number_ids, payload_filter, payload_filter_arrays
    FROM webhooks WHERE id = @webhook_id AND workspace_id = @workspace_id
), page AS (
    SELECT e.txid, e.id, e.payload
    FROM events e
    WHERE e.workspace_id = @workspace_id
      AND (e.txid, e.id) > (@txid::text::xid8, @event_id::text)
      AND e.txid < (SELECT xmin FROM horizon)
      AND e.created_at >= coalesce(@since::timestamptz, '-infinity')
      AND dispatcher_hears((SELECT events FROM hook), (SELECT number_ids FROM hook),
                           e.type, e.number_id)
      AND ((SELECT payload_filter FROM hook) IS NULL
           OR dispatcher_filter_passes(e.payload::jsonb -> 'data',
                                       (SELECT payload_filter FROM hook),
                                       (SELECT payload_filter_arrays FROM hook),
                                       (SELECT deadline FROM horizon)))
    ORDER BY e.txid, e.id
    LIMIT @limit
)
SELECT horizon.xmin::text AS horizon, page.txid::text AS txid, page.id, page.payload
FROM horizon LEFT JOIN page ON true
ORDER BY page.txid, page.id

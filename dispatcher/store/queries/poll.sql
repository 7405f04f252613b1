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
-- position (@txid, @event_id), created at or after @since (NULL: any): dispatcher_poll
-- (functions.sql), oldest first. One row with NULL event columns when there is none; every
-- row carries the horizon, where a short page leaves the position.
SELECT horizon::text AS horizon, txid::text AS txid, id, payload
FROM dispatcher_poll(@workspace_id, @webhook_id, @txid::text::xid8, @event_id,
                     @since::timestamptz, @limit)

-- Pull delivery: a poll webhook's events, read by its polls (dispatcher/store/poll.py,
-- docs/webhooks.md "Poll mode").

-- name: poll
-- A poll of webhook @webhook_id of workspace @workspace_id: its next @limit events after
-- position (@txid, @event_id), created at or after @since (NULL: any), oldest first, with
-- the webhook's mode, whether it is disabled, and the horizon (where a short page leaves the
-- position): dispatcher_poll (functions.sql). No row when there is no such webhook.
SELECT mode, disabled, horizon::text AS horizon, txid::text AS txid, id, payload
FROM dispatcher_poll(@workspace_id, @webhook_id, @txid::text::xid8, @event_id,
                     @since::timestamptz, @limit)

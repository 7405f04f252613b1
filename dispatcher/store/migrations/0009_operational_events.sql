-- Schema 9: operational events and ordering keys (docs/events.md, "Operational events";
-- docs/webhooks.md, "Ordered delivery").
--
-- The service publishes events about its own work (webhook.disabled, webhook.enabled,
-- delivery.exhausted, delivery.recovered) into the workspace's stream, never to the
-- subscription they are about; and an event may carry an ordering key. The one writer of
-- `events` and the one way into `deliveries` take both as new arguments.
--
-- Signatures change, so the new functions are made beside the old ones, with every argument
-- required (no call can match both), and the old ones are replaced in place by calls to the
-- new ones. Nothing is dropped: a function dropped while a transaction is in a call to it fails
-- that transaction, and an outbox publish held up by this migration must commit afterwards.
-- The previous release calls the old signatures, by position: the same as before.
--
-- `workspaces.operator` marks the operator sink's internal workspace
-- (DISPATCHER_OPERATOR_WEBHOOK_URL). `events.ordering_key` is the event's lane.
--
-- Locks: ACCESS EXCLUSIVE on `events` and each of its partitions, then on `workspaces`, for catalog
-- changes (a nullable column, or one with a constant default, rewrites nothing): milliseconds.
-- `events` first: an outbox publish locks `events`, then `workspaces` (its foreign key); taking
-- them in the same order, this migration waits for it instead of deadlocking with it.
ALTER TABLE events ADD COLUMN ordering_key text;
ALTER TABLE workspaces ADD COLUMN operator boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX workspaces_operator ON workspaces (operator) WHERE operator;

-- Its functions as this version left them (dispatcher_add_deliveries, dispatcher_fan_out,
-- dispatcher_append_event, dispatcher_publish_event) are now dispatcher/store/functions.sql's,
-- applied by every upgrade in its transaction: a migration never restates a function
-- (docs/operations.md, "Functions").

-- Schema 3: the engine's narrow queue, engine heartbeats, and a fan-out without NOTIFY.
--
-- Pending deliveries move from the history table (deliveries) to delivery_queue; the
-- history keeps what the API reads. Stop every engine of the previous version first
-- (docs/operations.md): they lease rows through deliveries.lease_owner, which goes away.

-- First: no publisher may add a delivery between the backfill below and the new fan-out
-- (a delivery written by the old fan-out after the backfill read the table would have no
-- queue row and never be sent). Held to the end of this migration (well under a second per
-- 100,000 pending deliveries); readers are not blocked.
LOCK TABLE events, deliveries IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE delivery_queue (
    delivery_id  text PRIMARY KEY,
    -- The history row's partition key: (delivery_id, created_at) is its primary key.
    created_at   timestamptz NOT NULL,
    webhook_id   text NOT NULL,
    event_id     text NOT NULL,
    is_test      boolean NOT NULL DEFAULT false,
    due_at       timestamptz NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    lease_owner  text
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.01);
-- The claim walks this in due order (claimed rows sit at 'infinity', past every due one).
CREATE INDEX delivery_queue_due ON delivery_queue (due_at);
-- Requests in flight per endpoint, across every engine (at most the concurrency limits).
CREATE INDEX delivery_queue_leased ON delivery_queue (webhook_id, lease_owner)
    WHERE lease_owner IS NOT NULL;
-- Pending work of one endpoint, in due order (the claim's visits; disable, delete).
CREATE INDEX delivery_queue_webhook ON delivery_queue (webhook_id, due_at);

-- Live engines. Each beats every second (database time); an engine silent for
-- DISPATCHER_HEARTBEAT_TIMEOUT seconds is dead: the next beat of any live engine removes it
-- and hands its leased rows back, due at once, so its slots free within seconds.
CREATE TABLE dispatcher_engines (
    owner       text PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now()
);

-- Every pending delivery moves in. A row leased by an engine of the previous version comes in
-- unleased, due when that lease would have run out (its next_attempt_at), so it is not sent a
-- second time while that engine may still be sending it.
INSERT INTO delivery_queue (delivery_id, created_at, webhook_id, event_id, is_test, due_at,
                            attempts)
SELECT id, created_at, webhook_id, event_id, event_type = 'webhook.test',
       coalesce(next_attempt_at, now()), attempts
FROM deliveries
WHERE status = 'pending';

-- The history no longer carries the claim's state.
DROP INDEX IF EXISTS deliveries_due;
DROP INDEX IF EXISTS deliveries_leased;
DROP INDEX IF EXISTS deliveries_pending_by_webhook;
ALTER TABLE deliveries DROP COLUMN IF EXISTS lease_owner;

-- Its functions as this version left them (dispatcher_fan_out) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

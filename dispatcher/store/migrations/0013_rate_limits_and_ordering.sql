-- Schema 13: per-endpoint rate limits and ordered delivery (docs/delivery.md, "Rate limits"
-- and "Ordered delivery"; docs/webhooks.md).
--
-- `webhooks.rate_limit` (requests per second, NULL: none) and `webhooks.ordering` ('none' or
-- 'fifo'). A limited endpoint's token bucket is its row in `webhook_rates`, which every
-- engine's claim takes from. A fifo subscription's deliveries carry their lane and place in it
-- (`delivery_queue.lane`, `lane_seq`); `delivery_lanes` names each lane's head.
--
-- dispatcher_add_deliveries is replaced in place (same signature): a fifo subscription's new
-- delivery joins its lane. The outbox function gets an ordering key: a new signature with
-- every argument required, beside the old one, which is replaced in place by a call to it (a
-- call of three or four arguments matches only the old one, of five only the new one).
-- Nothing is dropped: an outbox publish held up by this migration commits afterwards. The
-- previous release keeps running on the new schema: it never names the new columns (its
-- fan-out makes deliveries outside lanes, as a 'none' subscription's), and every subscription
-- is 'none' without a rate limit until one is set through this release's API. Only this
-- release's engines keep a rate limit or a lane: set them once every engine runs it.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` (its new CHECK constraints read it once: a table of
-- subscriptions, milliseconds) and on `delivery_queue` (nullable columns rewrite nothing; the
-- new partial index reads the backlog once and holds no row).
ALTER TABLE webhooks
    ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 10000),
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo'));
ALTER TABLE delivery_queue ADD COLUMN lane text, ADD COLUMN lane_seq bigint;
CREATE INDEX delivery_queue_lane ON delivery_queue (webhook_id, lane, lane_seq)
    WHERE lane IS NOT NULL;
CREATE SEQUENCE delivery_lane_seq;

CREATE TABLE delivery_lanes (
    webhook_id  text NOT NULL,
    lane        text NOT NULL,
    head_id     text NOT NULL,
    PRIMARY KEY (webhook_id, lane)
);
CREATE INDEX delivery_lanes_head ON delivery_lanes (head_id);

CREATE TABLE webhook_rates (
    webhook_id  text PRIMARY KEY,
    ready_at    timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX webhook_rates_ready ON webhook_rates (ready_at);

-- Its functions as this version left them (dispatcher_advance_lanes, dispatcher_add_deliveries,
-- dispatcher_publish_event) are now dispatcher/store/functions.sql's, applied by every upgrade in
-- its transaction: a migration never restates a function (docs/operations.md, "Functions").

-- Schema 22: flow control from the receiver (docs/delivery.md, "Flow control"): an endpoint's
-- effective rate, adapted to the receiver's 429 answers (AIMD; domain/flow_control.py).
--
-- `webhooks.adapted_rate` (requests a second; NULL, the default: not adapted, the endpoint's
-- `rate_limit` or none), `adapted_ceiling` (what it recovers to), `adapted_at` (its last
-- change) and `slowed_at` (its last decrease). The claim's token bucket runs at
-- coalesce(adapted_rate, rate_limit); an endpoint without a rate limit whose rate is adapted
-- has a bucket (webhook_rates) while it is. `webhooks_adapted`: the monitor's read of the
-- adapted endpoints (the `dispatcher_endpoint_effective_rate` gauge), a handful of rows.
--
-- The previous release keeps running on the new schema: it never names the columns, and every
-- subscription has them NULL until this release's engines see a 429.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` for the columns (nullable, no default: nothing is
-- rewritten; the CHECK reads the table once), then SHARE while the partial index is built (it
-- holds no row: every value is NULL). A table of subscriptions: milliseconds.
ALTER TABLE webhooks
    ADD COLUMN adapted_rate double precision CHECK (adapted_rate > 0),
    ADD COLUMN adapted_ceiling double precision CHECK (adapted_ceiling > 0),
    ADD COLUMN adapted_at timestamptz,
    ADD COLUMN slowed_at timestamptz;
CREATE INDEX webhooks_adapted ON webhooks (id) WHERE adapted_rate IS NOT NULL;

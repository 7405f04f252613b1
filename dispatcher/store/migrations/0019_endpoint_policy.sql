-- Schema 19: per-endpoint policy (docs/webhooks.md, "Delivery policy"): an endpoint's own
-- attempt timeout and retry schedule.
--
-- `webhooks.timeout_seconds` (0.1..30) and `webhooks.retry_schedule` (1..20 delays in seconds,
-- each 1..86,400); NULL, the default, follows DISPATCHER_REQUEST_TIMEOUT and
-- DISPATCHER_RETRY_SCHEDULE. The bounds are domain/endpoints.py's (tests/store/
-- test_facts_agree.py compares them). Nothing else changes: the claim reads them with the
-- endpoint's other options.
--
-- The previous release keeps running on the new schema: it never names the columns, and
-- every subscription has them NULL (the global settings) until this release's API sets them.
-- Only this release's engines honour them.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` (nullable columns without a default rewrite nothing;
-- their CHECK constraints read the table once: a table of subscriptions, milliseconds).
ALTER TABLE webhooks
    ADD COLUMN timeout_seconds double precision
        CHECK (timeout_seconds >= 0.1 AND timeout_seconds <= 30),
    ADD COLUMN retry_schedule integer[]
        CHECK (cardinality(retry_schedule) BETWEEN 1 AND 20
               AND array_ndims(retry_schedule) = 1
               AND 1 <= ALL (retry_schedule) AND 86400 >= ALL (retry_schedule)
               AND array_position(retry_schedule, NULL) IS NULL);

-- Schema 12: a subscription's custom headers and payload filter (docs/webhooks.md, "Custom
-- headers" and "Payload filters").
--
-- `webhooks.headers` and `webhooks.secret_headers` (name -> value, sent with every attempt)
-- and `webhooks.payload_filter` (an event goes to the subscription only when its data
-- contains it). The one way into `deliveries` applies the filter: its signature does not
-- change (the event's data is read back from the event's row), so it is replaced in place,
-- and every caller, of this release or the previous one, gets the filter. Nothing is dropped.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` while the columns are added (nullable, or with a
-- constant default: no rewrite) and their CHECKs are verified (one scan of the
-- subscriptions, which are few): milliseconds.
ALTER TABLE webhooks ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(headers) = 'object');
ALTER TABLE webhooks ADD COLUMN secret_headers jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(secret_headers) = 'object');
ALTER TABLE webhooks ADD COLUMN payload_filter jsonb
    CHECK (jsonb_typeof(payload_filter) = 'object' AND payload_filter <> '{}');

-- Its functions as this version left them (dispatcher_add_deliveries) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

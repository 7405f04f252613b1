-- Schema 14: batch publishing (POST /v1/events/batch, docs/events.md) and Idempotency-Key on
-- messages (POST /v1/messages, docs/messages.md).
--
-- `dispatcher_append_events` is new: many events in one call (one INSERT, then the fan-out of
-- each event that a live subscription hears, through dispatcher_add_deliveries). Nothing
-- earlier calls it, and nothing is replaced or dropped.
--
-- `messages.idempotency_key` and `messages.request_fingerprint` (nullable) with a partial
-- lookup index. The previous release keeps running on the new schema: it never names them,
-- and its messages have neither.
--
-- Locks: ACCESS EXCLUSIVE on `messages` for the new columns (nullable, no default: a catalog
-- change, milliseconds once the lock is held); the index build (SHARE) reads the table once
-- and holds no entry, since no message has a key yet.
ALTER TABLE messages ADD COLUMN idempotency_key text, ADD COLUMN request_fingerprint bytea;
CREATE INDEX messages_idempotency
    ON messages (workspace_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Its functions as this version left them (dispatcher_append_events) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

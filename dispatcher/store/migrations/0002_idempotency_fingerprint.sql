-- Schema 2: events.request_fingerprint, the SHA-256 of the publishing request's body as a JSON
-- value, kept with events published under an Idempotency-Key (only the identical request
-- replays the event). Rows from schema 1 keep NULL: they replay whatever the request, as they
-- did.
--
-- Locks: ACCESS EXCLUSIVE on events and each of its partitions, for a catalog change only (a
-- nullable column without a default rewrites nothing): milliseconds once the lock is held.
ALTER TABLE events ADD COLUMN request_fingerprint bytea;

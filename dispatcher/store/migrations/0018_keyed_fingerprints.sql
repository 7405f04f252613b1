-- Schema 18: Idempotency-Key fingerprints are keyed (HMAC-SHA-256 under a key derived from the
-- instance secret, dispatcher/api/idempotency.py), and an expunge erases an event's
-- fingerprint and ordering key, and a message's fingerprint (queries/expunge.sql).
--
-- No column changes. The plain SHA-256 fingerprints stored before could be brute-forced back
-- to what a request held (a phone number), expunged or not, so they go: NULL, which the
-- replay rule reads as "stored before fingerprints existed" (a request under such a key,
-- within its 24 hours, replays the first answer whatever its body; store/idempotency.py).
-- Events expunged before lose their ordering key, as an expunge does from now on. Row locks
-- only, on the rows changed; each table is read once.
UPDATE events SET request_fingerprint = NULL,
                  ordering_key = CASE WHEN expunged_at IS NULL THEN ordering_key END
WHERE request_fingerprint IS NOT NULL OR (expunged_at IS NOT NULL AND ordering_key IS NOT NULL);
UPDATE messages SET request_fingerprint = NULL WHERE request_fingerprint IS NOT NULL;

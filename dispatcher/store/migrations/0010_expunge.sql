-- Schema 10: removing content (docs/events.md, "Removing content"; docs/messages.md).
--
-- `events.expunged_at`: when an event's content was erased (POST /v1/events/{id}/expunge): its
-- payload is rewritten as the envelope with `"data":null`, and none of its deliveries is sent
-- again. NULL on every event stored before this version (none was expunged).
--
-- `messages.text` may now be NULL, and `messages.expunged_at` says when it was erased
-- (POST /v1/messages/{id}/expunge).
--
-- `delivery_queue.expunged`: set on a queue row leased (in flight) when its event was
-- expunged; the record of that attempt keeps no response excerpt and schedules no retry, and a
-- claim of the row gives it up. False on every row queued before this version.
--
-- Locks: ACCESS EXCLUSIVE on events (and each of its partitions), messages and delivery_queue,
-- each for a catalog change (nullable columns without a default, a constant default, a
-- dropped NOT NULL: nothing is rewritten or scanned): milliseconds once held. The previous
-- release keeps running on it: it never names the new columns (its queue inserts take the
-- default), and never writes a NULL text. It does not honour `delivery_queue.expunged`: an
-- expunge made while an engine of the previous release holds one of the event's deliveries
-- in flight is recorded by that engine as before (its excerpt kept; a retry it schedules is
-- sent with the erased payload).
ALTER TABLE events ADD COLUMN expunged_at timestamptz;

ALTER TABLE messages ALTER COLUMN text DROP NOT NULL;
ALTER TABLE messages ADD COLUMN expunged_at timestamptz;

ALTER TABLE delivery_queue ADD COLUMN expunged boolean NOT NULL DEFAULT false;

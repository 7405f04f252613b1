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

-- Many events at once, in one call: the multi-row door every batch takes (POST
-- /v1/events/batch, the carrier's steps, operational events: dispatcher/store/events.py). It
-- checks nothing (the service has): not an outbox function. The arrays run in
-- parallel, one element per event: its id, workspace, type, number, data, idempotency key and
-- request fingerprint (NULL: none), the subscriber left out (an operational event's) and its
-- ordering key; every event is from p_source at p_created_at with p_trace_context. Returns one
-- row per event, in the arrays' order: its id, its payload (the envelope, as
-- dispatcher_append_event stores it) and how many deliveries it made.
--
-- One INSERT for every event, then the fan-out, event by event in the arrays' order (so that
-- the events of one ordering lane join a fifo subscription's lane in that order), through
-- dispatcher_add_deliveries, the one rule of who hears what. It is called only for an event
-- whose workspace has a live subscription to its type: a cheap necessary condition (one probe
-- of webhooks_live) that spares a batch without subscribers a call per event.
CREATE OR REPLACE FUNCTION dispatcher_append_events(
    p_ids text[], p_workspace_ids text[], p_types text[], p_number_ids text[], p_source text,
    p_data json[], p_created_at timestamptz, p_idempotency_keys text[], p_fingerprints bytea[],
    p_trace_context text, p_excluded_webhook_ids text[], p_ordering_keys text[]
) RETURNS TABLE (event_id text, event_payload text, event_fanned integer)
LANGUAGE plpgsql AS $$
DECLARE
    stored_ids text[];
    stored_payloads text[];
    item record;
BEGIN
    WITH stored AS (
        INSERT INTO events (id, workspace_id, type, number_id, source, payload,
                            idempotency_key, request_fingerprint, created_at, trace_context,
                            ordering_key)
        SELECT new.id, new.workspace_id, new.type, new.number_id, p_source,
               dispatcher_envelope(new.id, new.type, p_created_at, new.data),
               new.idempotency_key, new.fingerprint, p_created_at, p_trace_context,
               new.ordering_key
        FROM unnest(p_ids, p_workspace_ids, p_types, p_number_ids, p_data, p_idempotency_keys,
                    p_fingerprints, p_ordering_keys)
            AS new (id, workspace_id, type, number_id, data, idempotency_key, fingerprint,
                    ordering_key)
        RETURNING events.id, events.payload
    )
    SELECT array_agg(stored.id), array_agg(stored.payload)
    INTO stored_ids, stored_payloads
    FROM stored;

    FOR item IN
        SELECT new.id, new.workspace_id, new.type, new.number_id, new.excluded, made.payload,
               EXISTS (SELECT 1 FROM webhooks w
                       WHERE w.workspace_id = new.workspace_id
                         AND w.deleted_at IS NULL AND w.disabled_at IS NULL
                         AND new.type = ANY (w.events)) AS heard
        FROM unnest(p_ids, p_workspace_ids, p_types, p_number_ids, p_excluded_webhook_ids)
                 WITH ORDINALITY AS new (id, workspace_id, type, number_id, excluded, position)
        JOIN unnest(stored_ids, stored_payloads) AS made (id, payload) ON made.id = new.id
        ORDER BY new.position
    LOOP
        event_id := item.id;
        event_payload := item.payload;
        event_fanned := 0;
        IF item.heard THEN
            event_fanned := dispatcher_add_deliveries(item.id, p_created_at, item.workspace_id,
                                                      item.type, item.number_id, NULL, NULL,
                                                      NULL, item.excluded);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;


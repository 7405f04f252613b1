-- Schema 8: the trace context of an event's publish (dispatcher/tracing.py; docs/operations.md,
-- "Tracing").
--
-- `events.trace_context` holds the W3C traceparent of the span that published the event, when
-- tracing is on: the span of every attempt of the event links to it, however much later and in
-- whichever process the attempt is made. NULL when tracing is off, for the outbox's events, and
-- on every event stored before this version (their attempts' spans have no link).
--
-- `dispatcher_append_event`, the one way into `events`, took the trace context since schema 6
-- and left it out; it is replaced in place (same signature, never dropped: a transaction in the
-- middle of a call to it, an outbox publish held up by this migration's lock on `events`,
-- carries on when it commits) by one that stores it.
--
-- Locks: ACCESS EXCLUSIVE on `events` and each of its partitions for a catalog change (a
-- nullable column without a default rewrites nothing): milliseconds once held (4.8 ms with a
-- million events). The previous release keeps running on it: it never names the column, and
-- calls dispatcher_append_event as schema 6 made it.
ALTER TABLE events ADD COLUMN trace_context text;

CREATE OR REPLACE FUNCTION dispatcher_append_event(
    p_id text, p_workspace_id text, p_type text, p_number_id text, p_source text,
    p_data json, p_created_at timestamptz, p_idempotency_key text DEFAULT NULL,
    p_fingerprint bytea DEFAULT NULL, p_webhook_ids text[] DEFAULT NULL,
    p_trace_context text DEFAULT NULL, OUT payload text, OUT fanned integer
)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (id, workspace_id, type, number_id, source, payload, idempotency_key,
                        request_fingerprint, created_at, trace_context)
    VALUES (p_id, p_workspace_id, p_type, p_number_id, p_source,
            dispatcher_envelope(p_id, p_type, p_created_at, p_data), p_idempotency_key,
            p_fingerprint, p_created_at, p_trace_context)
    RETURNING events.payload INTO payload;
    fanned := dispatcher_add_deliveries(p_id, p_created_at, p_workspace_id, p_type, p_number_id,
                                        p_webhook_ids);
END
$$;

-- Flow control from the receiver (dispatcher/store/flow_control.py, domain/flow_control.py):
-- the endpoints' adapted rates, read and written in the record transaction, and read by the
-- monitor for the effective-rate gauge.

-- name: flow_states
-- The flow state of webhooks @webhook_ids (already locked by the record, in id order): their rate
-- limit, their adapted rate and its times, and how many attempts the health rollups counted from
-- @since (the start of the previous minute) on, every engine's rows: their throughput, for an
-- endpoint without a rate limit that gets its first 429.
SELECT w.id, w.rate_limit, w.adapted_rate, w.adapted_ceiling, w.adapted_at, w.slowed_at,
       CASE WHEN w.rate_limit IS NULL AND w.adapted_rate IS NULL THEN
           (SELECT coalesce(sum(m.success + m.http_error + m.timeout + m.connection_error
                                + m.blocked), 0)
            FROM webhook_stats_minutes m
            WHERE m.webhook_id = w.id AND m.minute >= @since)
       END AS recent_attempts
FROM webhooks w
WHERE w.id = ANY(@webhook_ids::text[])

-- name: set_flow_states
-- Write the flow states of webhooks @webhook_ids (@rates, @ceilings, @changed_at, @slowed_at; a
-- NULL rate: not adapted any more). An endpoint without a rate limit gets a token bucket while
-- its rate is adapted (made full, at the adapted rate) and loses it when the rate has recovered.
WITH u AS (
    SELECT * FROM unnest(@webhook_ids::text[], @rates::float8[], @ceilings::float8[],
                         @changed_at::timestamptz[], @slowed_at::timestamptz[])
         AS u(id, rate, ceiling, changed_at, slowed_at)
), changed AS (
    UPDATE webhooks w
    SET adapted_rate = u.rate, adapted_ceiling = u.ceiling, adapted_at = u.changed_at,
        slowed_at = u.slowed_at
    FROM u
    WHERE w.id = u.id
    RETURNING w.id, w.rate_limit, w.adapted_rate
), made AS (
    INSERT INTO webhook_rates (webhook_id)
    SELECT id FROM changed WHERE rate_limit IS NULL AND adapted_rate IS NOT NULL
    ON CONFLICT DO NOTHING
), dropped AS (
    DELETE FROM webhook_rates r
    USING changed c
    WHERE r.webhook_id = c.id AND c.rate_limit IS NULL AND c.adapted_rate IS NULL
)
SELECT count(*) FROM changed

-- name: adapted_rates
-- The endpoints whose rate is adapted now, with it, at most @cap of them in id order (through
-- webhooks_adapted): the monitor's effective-rate gauge.
SELECT id, adapted_rate FROM webhooks
WHERE adapted_rate IS NOT NULL AND deleted_at IS NULL
ORDER BY id LIMIT @cap

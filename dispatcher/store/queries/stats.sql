-- Endpoint health (dispatcher/store/stats.py says what is counted where): the recorder's
-- upsert into the rollups, the window read, the minute rows, and the rollups' retention.
--
-- The rollups keep one column per attempt outcome (success, http_error, timeout,
-- connection_error, blocked: dispatcher.domain.health.OUTCOMES, in its order) and a
-- response-time histogram of 103 buckets (health.BUCKETS); both are written out in the
-- statements below, and tests/store/test_queries.py checks them against the domain.

-- name: record_batch
-- Add a batch's tallies to engine @engine's rows of the rollups: minute tallies to
-- webhook_stats_minutes, hour tallies to webhook_stats_hours, in key order. One element per
-- tally in each array: @spans ('minute' or 'hour'), @webhook_ids, @starts_at (each span's
-- start), the attempts by outcome (@success, @http_error, @timeout, @connection_error,
-- @blocked), the deliveries settled (@delivered, @failed), the start of the latest success
-- and failure (@last_success_at, @last_failure_at), and @histograms, each response-time
-- histogram as an array literal (NULL: none answered). Counts add up; histograms bucket by
-- bucket (dispatcher_add_histograms, functions.sql: inlined, no call per row); the latest
-- success and failure keep the later.
WITH tally AS (
    SELECT t.span, t.webhook_id, t.starts_at,
           t.success, t.http_error, t.timeout, t.connection_error, t.blocked,
           t.delivered, t.failed, t.last_success_at, t.last_failure_at,
           t.histogram::integer[] AS response_ms
    FROM unnest(@spans::text[], @webhook_ids::text[], @starts_at::timestamptz[],
                @success::int[], @http_error::int[], @timeout::int[],
                @connection_error::int[], @blocked::int[], @delivered::int[], @failed::int[],
                @last_success_at::timestamptz[], @last_failure_at::timestamptz[],
                @histograms::text[])
         AS t(span, webhook_id, starts_at,
              success, http_error, timeout, connection_error, blocked, delivered, failed,
              last_success_at, last_failure_at, histogram)
), minutes AS (
    INSERT INTO webhook_stats_minutes AS r (
        webhook_id, minute,
        success, http_error, timeout, connection_error, blocked, delivered, failed,
        response_ms, engine)
    SELECT webhook_id, starts_at,
           success, http_error, timeout, connection_error, blocked, delivered, failed,
           response_ms, @engine
    FROM tally WHERE span = 'minute'
    -- Each engine (@engine) adds to rows of its own: engines never wait on one another here.
    ORDER BY webhook_id, starts_at
    ON CONFLICT (webhook_id, minute, engine) DO UPDATE
    SET
    success = r.success + excluded.success,
    http_error = r.http_error + excluded.http_error,
    timeout = r.timeout + excluded.timeout,
    connection_error = r.connection_error + excluded.connection_error,
    blocked = r.blocked + excluded.blocked,
    delivered = r.delivered + excluded.delivered,
    failed = r.failed + excluded.failed,
    response_ms = dispatcher_add_histograms(r.response_ms, excluded.response_ms)
)
INSERT INTO webhook_stats_hours AS r (
    webhook_id, hour,
    success, http_error, timeout, connection_error, blocked, delivered, failed,
    response_ms, last_success_at, last_failure_at, engine)
SELECT webhook_id, starts_at,
       success, http_error, timeout, connection_error, blocked, delivered, failed,
       response_ms, last_success_at, last_failure_at, @engine
FROM tally WHERE span = 'hour'
-- Each engine (@engine) adds to rows of its own: engines never wait on one another here.
ORDER BY webhook_id, starts_at
ON CONFLICT (webhook_id, hour, engine) DO UPDATE
SET
    success = r.success + excluded.success,
    http_error = r.http_error + excluded.http_error,
    timeout = r.timeout + excluded.timeout,
    connection_error = r.connection_error + excluded.connection_error,
    blocked = r.blocked + excluded.blocked,
    delivered = r.delivered + excluded.delivered,
    failed = r.failed + excluded.failed,
    response_ms = dispatcher_add_histograms(r.response_ms, excluded.response_ms)
    , last_success_at = greatest(r.last_success_at, excluded.last_success_at),
    last_failure_at = greatest(r.last_failure_at, excluded.last_failure_at)

-- name: endpoint_health
-- One endpoint's (@webhook_id) figures over a window from @since (a minute's start), from one
-- snapshot: minute rows in [@since, @hours_from) and from @hours_until on, hour rows in
-- [@hours_from, @hours_until) (@hours_from, @hours_until: the window's whole hours), every engine's
-- rows added up; its status changes since @since; its pending deliveries; the start of its latest
-- success and failure, and since when it has been failing; its effective rate now (flow control:
-- adapted by the receiver's 429s, else its rate limit; NULL: none).
WITH rows AS (
    -- Minute rows before the first whole hour and from the current hour on (two ranges of
    -- the primary key: the minutes in between are never read), whole hours in between.
    SELECT success, http_error, timeout, connection_error, blocked, delivered, failed,
           response_ms
    FROM webhook_stats_minutes
    WHERE webhook_id = @webhook_id AND minute >= @since AND minute < @hours_from
    UNION ALL
    SELECT success, http_error, timeout, connection_error, blocked, delivered, failed,
           response_ms
    FROM webhook_stats_minutes
    WHERE webhook_id = @webhook_id AND minute >= @hours_until
    UNION ALL
    SELECT success, http_error, timeout, connection_error, blocked, delivered, failed,
           response_ms
    FROM webhook_stats_hours
    WHERE webhook_id = @webhook_id AND hour >= @hours_from AND hour < @hours_until
), totals AS (
    SELECT coalesce(sum(success), 0) AS success,
           coalesce(sum(http_error), 0) AS http_error,
           coalesce(sum(timeout), 0) AS timeout,
           coalesce(sum(connection_error), 0) AS connection_error,
           coalesce(sum(blocked), 0) AS blocked,
           coalesce(sum(delivered), 0) AS delivered,
           coalesce(sum(failed), 0) AS failed,
           array_agg(response_ms) FILTER (WHERE response_ms IS NOT NULL) AS histograms
    FROM rows
), changes AS (
    SELECT coalesce(sum(delivered), 0) AS delivered, coalesce(sum(failed), 0) AS failed
    FROM webhook_status_changes
    WHERE webhook_id = @webhook_id AND minute >= @since
), latest AS (
    -- Walking back the endpoint's hours to the latest one with a success (a failure): at
    -- most the hours kept, however long ago (every engine's rows of the latest such hour).
    SELECT (SELECT max(last_success_at) FROM webhook_stats_hours
            WHERE webhook_id = @webhook_id AND hour = (
                SELECT max(hour) FROM webhook_stats_hours
                WHERE webhook_id = @webhook_id AND last_success_at IS NOT NULL)) AS last_success_at,
           (SELECT max(last_failure_at) FROM webhook_stats_hours
            WHERE webhook_id = @webhook_id AND hour = (
                SELECT max(hour) FROM webhook_stats_hours
                WHERE webhook_id = @webhook_id AND last_failure_at IS NOT NULL)) AS last_failure_at
)
SELECT t.*, c.delivered AS changed_delivered, c.failed AS changed_failed,
       -- The queue holds exactly the pending deliveries: this costs the endpoint's backlog.
       (SELECT count(*) FROM delivery_queue q
        WHERE q.webhook_id = @webhook_id AND q.created_at >= @since) AS pending,
       l.last_success_at, l.last_failure_at,
       -- Failing: the run of failures started with the first attempt after the latest
       -- success (every later one failed). The attempt log is asked only then; should the
       -- run be older than the log (retention), its latest failure is what is known.
       CASE WHEN l.last_failure_at > coalesce(l.last_success_at, '-infinity') THEN
           coalesce((SELECT min(a.created_at) FROM delivery_attempts a
                     WHERE a.webhook_id = @webhook_id
                       AND a.created_at > coalesce(l.last_success_at, '-infinity')),
                    l.last_failure_at)
       END AS failing_since,
       (SELECT coalesce(w.adapted_rate, w.rate_limit) FROM webhooks w
        WHERE w.id = @webhook_id) AS effective_rate
FROM totals t CROSS JOIN changes c CROSS JOIN latest l

-- name: attempts_per_minute
-- An endpoint's attempts per minute from @since on, by outcome, every engine's rows added up
-- (a range of the primary key: at most the minutes asked for, times the engines).
SELECT minute,
       sum(success) AS success,
       sum(http_error) AS http_error,
       sum(timeout) AS timeout,
       sum(connection_error) AS connection_error,
       sum(blocked) AS blocked
FROM webhook_stats_minutes
WHERE webhook_id = @webhook_id AND minute >= @since
GROUP BY minute
ORDER BY minute

-- name: forget_minutes
-- Delete the minute rows of the rollup older than @before (past their use: the hours hold them).
DELETE FROM webhook_stats_minutes WHERE minute < @before

-- name: forget_status_changes
-- Delete the status changes counted in minutes older than @before.
DELETE FROM webhook_status_changes WHERE minute < @before

-- name: forget_hours
-- Delete the hour rows of the rollup older than @before (past retention).
DELETE FROM webhook_stats_hours WHERE hour < @before

-- Endpoint health read minute by minute (the window reads are built in store/stats.py).

-- name: attempts_per_minute
-- An endpoint's attempts per minute from $2 on, by outcome, every engine's rows added up
-- (a range of the primary key: at most the minutes asked for, times the engines).
SELECT minute,
       sum(success) AS success,
       sum(http_error) AS http_error,
       sum(timeout) AS timeout,
       sum(connection_error) AS connection_error,
       sum(blocked) AS blocked
FROM webhook_stats_minutes
WHERE webhook_id = $1 AND minute >= $2
GROUP BY minute
ORDER BY minute

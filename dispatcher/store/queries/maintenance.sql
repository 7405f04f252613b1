-- Partitions ahead of time, and retention by dropping whole days (dispatcher/store/
-- maintenance.py). A table name cannot be a parameter: the statements on one day's partitions
-- name it `..._p{day}`, `{day}` being the day as YYYYMMDD, which maintenance.py formats in
-- (from partition names it has matched, digits only); nothing else is ever formatted in.

-- name: try_lock
-- Take the maintenance lock (@key) until the transaction ends, if no replica holds it; returns
-- whether it was taken.
SELECT pg_try_advisory_xact_lock(@key)

-- name: ensure_partitions
-- Create the daily partitions from day @first_day to day @last_day that are missing; returns how
-- many.
SELECT dispatcher_ensure_partitions(@first_day, @last_day)

-- name: advance_lanes
-- Lanes whose head left the queue otherwise than by an attempt (a give-up on disable or
-- delete): their next delivery heads them, due at @now, or the lane goes (functions.sql,
-- dispatcher_advance_lanes). Lanes in use right now are left for the next run.
SELECT dispatcher_advance_lanes(NULL, @now)

-- name: rows_in_default
-- How many rows sit outside every daily partition (in the default ones).
SELECT (SELECT count(*) FROM events_default) + (SELECT count(*) FROM deliveries_default)

-- name: delivery_partitions
-- The names of the partitions of `deliveries`.
SELECT c.relname
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'deliveries'::regclass

-- name: bound_lock_waits
-- Wait at most 5 s for a lock, until the transaction ends: a drop waits briefly for the
-- statements in flight, and never stalls the claim path for long.
SET LOCAL lock_timeout = '5s'

-- name: lock_day
-- Lock one day of deliveries ({day}) first, so that no retry or recover can make a row pending
-- between the check and the drop.
LOCK TABLE deliveries_p{day} IN ACCESS EXCLUSIVE MODE

-- name: day_has_pending
-- Whether a delivery created in [@start, @end) (one day: its partition alone) is pending.
SELECT EXISTS (
    SELECT 1 FROM deliveries
    WHERE created_at >= @start AND created_at < @end AND status = 'pending'
)

-- name: forget_queued
-- Delete the queue rows of deliveries created in [@start, @end). (Nothing pending means none; one
-- left by a hand edit of the history would point at nothing once the day is gone.)
DELETE FROM delivery_queue WHERE created_at >= @start AND created_at < @end

-- name: drop_day
-- Drop one day ({day}) of attempts, deliveries and events, together.
DROP TABLE IF EXISTS delivery_attempts_p{day};
DROP TABLE deliveries_p{day};
DROP TABLE IF EXISTS events_p{day}

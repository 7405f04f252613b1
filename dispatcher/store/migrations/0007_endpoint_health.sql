-- Schema 7: endpoint health (GET /v1/webhooks/{id}/stats). Running totals per endpoint, by
-- minute and by hour: attempts by outcome with a histogram of response times, deliveries an
-- attempt settled, the latest success and failure; and, kept by a trigger, the changes of a
-- delivery's status made without an attempt.
--
-- The counts start with this version: attempts made and deliveries settled before it are not
-- in them (pending deliveries are counted from the queue, so they are). A backfill would have
-- to read every delivery of the last week while holding the trigger's lock on deliveries,
-- which blocks the engine; a week after the upgrade every window is whole.
--
-- Locks: CREATE TRIGGER takes SHARE ROW EXCLUSIVE on deliveries (writes wait for it, reads do
-- not): milliseconds once held. The new tables lock nothing else.

-- Endpoint health (GET /v1/webhooks/{id}/stats; dispatcher/store/stats.py): running totals, so
-- that a week of a busy endpoint is read from a few hundred rows, not a million attempts.
--
-- Per endpoint and minute, and per endpoint and hour: the attempts that started then, by
-- outcome, with `response_ms`, a histogram of the response times of those answered
-- (dispatcher/domain/health.py: 103 buckets, one per millisecond below 10 ms, then 10% wide;
-- NULL: none was answered); and the deliveries created then that an attempt settled, by
-- status. The recorder adds each batch in its record transaction, one upsert per endpoint
-- and minute or hour, from what it wrote. An hour also keeps the start of its latest success
-- and failure (the stats' `lastSuccessAt` and `lastFailureAt`).
--
-- Minute rows leave after the longest window, hour rows with retention: the maintenance loop
-- deletes them through BRIN indexes on their time (rows are written in time order). A btree
-- there could tempt the planner, for a read of one endpoint, to walk every endpoint's rows.
CREATE TABLE webhook_stats_minutes (
    webhook_id        text NOT NULL,
    minute            timestamptz NOT NULL,
    success           integer NOT NULL,
    http_error        integer NOT NULL,
    timeout           integer NOT NULL,
    connection_error  integer NOT NULL,
    blocked           integer NOT NULL,
    response_ms       integer[],
    delivered         integer NOT NULL,
    failed            integer NOT NULL,
    -- The engine that wrote the row: each engine adds to rows of its own, so engines never
    -- wait on one another's rows; reads add them up.
    engine            text NOT NULL,
    PRIMARY KEY (webhook_id, minute, engine)
) WITH (fillfactor = 70);
CREATE INDEX webhook_stats_minutes_age ON webhook_stats_minutes USING brin (minute);
CREATE TABLE webhook_stats_hours (
    webhook_id        text NOT NULL,
    hour              timestamptz NOT NULL,
    success           integer NOT NULL,
    http_error        integer NOT NULL,
    timeout           integer NOT NULL,
    connection_error  integer NOT NULL,
    blocked           integer NOT NULL,
    response_ms       integer[],
    delivered         integer NOT NULL,
    failed            integer NOT NULL,
    last_success_at   timestamptz,
    last_failure_at   timestamptz,
    engine            text NOT NULL,
    PRIMARY KEY (webhook_id, hour, engine)
) WITH (fillfactor = 70);
CREATE INDEX webhook_stats_hours_age ON webhook_stats_hours USING brin (hour);

-- Changes of a delivery's status made without an attempt (a give-up on disable or delete, a
-- retry, a recover), net, by endpoint and minute of the delivery's creation: kept by the
-- trigger below, whoever makes them. An attempt's own changes are the recorder's to count
-- (above); they are told apart by `attempts`, which only the recorder changes. Apart from the
-- recorder's rows, so that a give-up in a record transaction (after its webhook's row is
-- locked) never waits for a row another engine's record holds: no deadlock.
CREATE TABLE webhook_status_changes (
    webhook_id  text NOT NULL,
    minute      timestamptz NOT NULL,
    delivered   integer NOT NULL,
    failed      integer NOT NULL,
    PRIMARY KEY (webhook_id, minute)
);
CREATE INDEX webhook_status_changes_age ON webhook_status_changes USING brin (minute);

CREATE OR REPLACE TRIGGER deliveries_status_changed AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_count_status_changes();

-- Its functions as this version left them (dispatcher_count_status_changes) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

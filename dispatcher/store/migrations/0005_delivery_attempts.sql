-- Schema 5: the attempt log. Every attempt is kept (`delivery_attempts`), written by the
-- recorder in the same statement as its delivery; each queue row says what made it due
-- (`trigger`: the schedule, a manual retry, a recover, a test), for the attempt's record.
--
-- Attempts are partitioned like deliveries, by their delivery's created_at, so that a day's
-- attempts leave with that day's deliveries (retention drops the three partitions together).
--
-- Locks: ACCESS EXCLUSIVE on delivery_queue for a catalog change (a column with a constant
-- default rewrites nothing): milliseconds once held. The new table locks nothing else.
ALTER TABLE delivery_queue ADD COLUMN trigger text NOT NULL DEFAULT 'schedule';

CREATE TABLE delivery_attempts (
    id                   text NOT NULL,
    delivery_id          text NOT NULL,
    webhook_id           text NOT NULL,
    delivery_created_at  timestamptz NOT NULL,
    attempt_number       integer NOT NULL,
    created_at           timestamptz NOT NULL,
    response_status      integer,
    response_ms          integer NOT NULL,
    outcome              text NOT NULL,
    error                text,
    response_body        text,
    trigger              text NOT NULL,
    -- A delivery's attempts are numbered without a gap (the record fences each attempt on
    -- the count before it): the key is also how a delivery's attempts are read.
    PRIMARY KEY (delivery_id, attempt_number, delivery_created_at)
) PARTITION BY RANGE (delivery_created_at);
CREATE INDEX delivery_attempts_webhook
    ON delivery_attempts (webhook_id, created_at DESC, id DESC);
CREATE TABLE delivery_attempts_default PARTITION OF delivery_attempts DEFAULT;

-- A partition of attempts for every day that has one of deliveries.
DO $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT substr(c.relname, length('deliveries_p') + 1) AS suffix,
               pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'deliveries'::regclass AND c.relname ~ '^deliveries_p[0-9]{8}$'
    LOOP
        EXECUTE format('CREATE TABLE delivery_attempts_p%s PARTITION OF delivery_attempts %s',
                       part.suffix, part.bound);
    END LOOP;
END
$$;

-- Its functions as this version left them (dispatcher_ensure_partitions) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

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

CREATE OR REPLACE FUNCTION dispatcher_ensure_partitions(p_from date, p_to date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    lower_bound timestamptz;
    upper_bound timestamptz;
    suffix text;
    created integer := 0;
BEGIN
    -- Serialise partition creation (start-up of several replicas, maintenance loops).
    PERFORM pg_advisory_xact_lock(hashtext('dispatcher_partitions'));
    FOR day IN SELECT generate_series(p_from, p_to, interval '1 day')::date LOOP
        suffix := to_char(day, 'YYYYMMDD');
        lower_bound := day::timestamp AT TIME ZONE 'UTC';
        upper_bound := (day + 1)::timestamp AT TIME ZONE 'UTC';
        IF to_regclass('events_p' || suffix) IS NULL THEN
            IF EXISTS (SELECT 1 FROM events_default
                       WHERE created_at >= lower_bound AND created_at < upper_bound)
               OR EXISTS (SELECT 1 FROM deliveries_default
                          WHERE created_at >= lower_bound AND created_at < upper_bound)
               OR EXISTS (SELECT 1 FROM delivery_attempts_default
                          WHERE delivery_created_at >= lower_bound
                            AND delivery_created_at < upper_bound) THEN
                RAISE NOTICE 'dispatcher: rows for % are in the default partitions; skipped', day;
                CONTINUE;
            END IF;
            EXECUTE format(
                'CREATE TABLE events_p%s PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                suffix, lower_bound, upper_bound);
            EXECUTE format(
                'CREATE TABLE deliveries_p%s PARTITION OF deliveries FOR VALUES FROM (%L) TO (%L) '
                'WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
                'autovacuum_analyze_scale_factor = 0.02)',
                suffix, lower_bound, upper_bound);
            EXECUTE format(
                'CREATE TABLE delivery_attempts_p%s PARTITION OF delivery_attempts '
                'FOR VALUES FROM (%L) TO (%L)',
                suffix, lower_bound, upper_bound);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

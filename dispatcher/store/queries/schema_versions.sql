-- The schema version a database records, and the runner's own statements (dispatcher/store/
-- schema.py). schema.sql and the migrations themselves are files of their own.

-- name: lock_schema
-- Take the schema lock (@key) until the transaction ends: replicas starting together take turns.
SELECT pg_advisory_xact_lock(@key)

-- name: bound_lock_waits
-- Wait at most @milliseconds (milliseconds, as text) for each table lock, until the transaction
-- ends.
SELECT set_config('lock_timeout', @milliseconds, true)

-- name: lock_tables
-- Take every table of the schema but the versions' (a partitioned one with its partitions) in
-- ACCESS EXCLUSIVE mode, in one statement, before an upgrade changes anything. The upgrade is
-- one transaction and holds its locks to its end: a lock it waited for later, holding others,
-- could close a cycle with an application's transaction (an outbox publish that read
-- `webhooks` and then writes `events`), and Postgres would cancel one of the two. Taken first,
-- the tables an application reads before it publishes (workspaces, phone numbers, webhooks)
-- first, it waits for none after.
DO $$
BEGIN
    EXECUTE (
        SELECT 'LOCK TABLE '
               || string_agg(format('%I', c.relname),
                             ', ' ORDER BY c.relname NOT IN ('workspaces', 'phone_numbers',
                                                             'webhooks'),
                                           c.relname)
               || ' IN ACCESS EXCLUSIVE MODE'
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          -- Readiness reads the version meanwhile; only the upgrade writes it, under its lock.
          AND c.relname <> 'dispatcher_schema'
    );
END
$$

-- name: check_function_bodies
-- Whether CREATE FUNCTION checks a body against the schema (@on: 'on' or 'off'), until the
-- transaction ends: off while functions.sql is applied before the steps that make what its
-- bodies name.
SELECT set_config('check_function_bodies', @on, true)

-- name: record_version
-- Record that the database is now at version @version.
INSERT INTO dispatcher_schema (version) VALUES (@version)

-- name: has_versions
-- Whether the database has the table of versions (one made by dispatcher does).
SELECT to_regclass('dispatcher_schema') IS NOT NULL

-- name: version
-- The version the database is at (NULL: the table is empty).
SELECT max(version) FROM dispatcher_schema

-- The schema version a database records, and the runner's own statements (dispatcher/store/
-- schema.py). schema.sql and the migrations themselves are files of their own.

-- name: lock_schema
-- Take the schema lock ($1) until the transaction ends: replicas starting together take turns.
SELECT pg_advisory_xact_lock($1)

-- name: bound_lock_waits
-- Wait at most $1 (milliseconds, as text) for each table lock, until the transaction ends.
SELECT set_config('lock_timeout', $1, true)

-- name: record_version
-- Record that the database is now at version $1.
INSERT INTO dispatcher_schema (version) VALUES ($1)

-- name: has_versions
-- Whether the database has the table of versions (one made by dispatcher does).
SELECT to_regclass('dispatcher_schema') IS NOT NULL

-- name: version
-- The version the database is at (NULL: the table is empty).
SELECT max(version) FROM dispatcher_schema

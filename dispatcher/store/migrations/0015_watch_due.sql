-- Schema 15: the poller's probe runs in the database (docs/scaling.md, "Idle cost").
--
-- `dispatcher_watch_due` is new; nothing earlier calls it, and nothing is replaced or dropped:
-- the previous release's poller keeps sending its own probe. No table is touched: no lock
-- beyond the catalog's.
-- The database's one poller (store/notifications.py, engine/worker.py `_poll`) probes here, in
-- the database, instead of sending a statement every few milliseconds: one call waits for up
-- to p_for_seconds, probing every p_probe_seconds, and returns as soon as what is due differs
-- from what the poller saw last (p_seen_due, p_seen_newest), or when the time is up. A probe is
-- `due_mark`'s: how many rows are due (of the newest p_cap, read backwards through the due
-- index) and the newest due time, at the database's clock plus p_skew (a test's clock). So an
-- idle database costs the poller's process one round trip a second, and Postgres the probes
-- alone. Which changes are worth waking the engines for is decided by the caller
-- (queue.DueMark.announces). Index walks only, like the engine's statements: its plan must not
-- depend on statistics.
CREATE OR REPLACE FUNCTION dispatcher_watch_due(
    p_seen_due integer, p_seen_newest timestamptz, p_skew interval, p_probe_seconds float8,
    p_for_seconds float8, p_cap integer, OUT due integer, OUT newest timestamptz
)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => p_for_seconds);
BEGIN
    LOOP
        SELECT count(*)::integer, max(d.due_at) INTO due, newest FROM (
            SELECT q.due_at FROM delivery_queue q
            WHERE q.due_at <= clock_timestamp() + p_skew
            ORDER BY q.due_at DESC LIMIT p_cap
        ) d;
        EXIT WHEN due IS DISTINCT FROM p_seen_due OR newest IS DISTINCT FROM p_seen_newest
            OR clock_timestamp() >= deadline;
        PERFORM pg_sleep(p_probe_seconds);
    END LOOP;
END
$$;

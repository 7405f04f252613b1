-- Schema 4: a change to api_keys (a revocation, a deletion, a workspace's keys cascading away,
-- a TRUNCATE) notifies `dispatcher_api_keys`, so that every process that keeps valid keys in
-- memory forgets them at once (dispatcher/store/key_cache.py). The notification carries
-- nothing: keys change rarely, and forgetting all of them is simpler than forgetting one.
--
-- Locks: SHARE ROW EXCLUSIVE on api_keys while the triggers are created (milliseconds; API
-- key lookups read through it, revocations wait).
CREATE FUNCTION dispatcher_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_api_keys', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_api_keys_changed();

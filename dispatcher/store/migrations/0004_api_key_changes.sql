-- Schema 4: a change to api_keys (a revocation, a deletion, a workspace's keys cascading away,
-- a TRUNCATE) notifies `dispatcher_api_keys`, so that every process that keeps valid keys in
-- memory forgets them at once (dispatcher/store/key_cache.py). The notification carries
-- nothing: keys change rarely, and forgetting all of them is simpler than forgetting one.
--
-- Locks: SHARE ROW EXCLUSIVE on api_keys while the triggers are created (milliseconds; API
-- key lookups read through it, revocations wait).

CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_api_keys_changed();

-- Its functions as this version left them (dispatcher_api_keys_changed) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

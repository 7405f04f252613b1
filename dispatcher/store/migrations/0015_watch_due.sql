-- Schema 15: the poller's probe runs in the database (docs/scaling.md, "Idle cost").
--
-- `dispatcher_watch_due` is new; nothing earlier calls it, and nothing is replaced or dropped:
-- the previous release's poller keeps sending its own probe. No table is touched: no lock
-- beyond the catalog's.

-- Its functions as this version left them (dispatcher_watch_due) are now
-- dispatcher/store/functions.sql's, applied by every upgrade in its transaction: a migration never
-- restates a function (docs/operations.md, "Functions").

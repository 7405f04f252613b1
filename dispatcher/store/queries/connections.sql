-- The pool's own statements about its connections (dispatcher/store/database.py).

-- name: end_backend
-- End backend @pid, a connection of ours lost while its commit was in flight, and wait up to
-- @wait_ms ms until it is gone: from then on what it did is final (a commit in progress finishes
-- first; bytes it had not read yet are never read). True once it is gone (or already was); false
-- when it still was after @wait_ms ms. Only a backend of this role (the pid reused by another's
-- would be left alone), never this session's own.
SELECT coalesce(bool_and(pg_terminate_backend(pid, @wait_ms)), true)
FROM pg_stat_activity
WHERE pid = @pid AND usename = current_user AND pid <> pg_backend_pid()

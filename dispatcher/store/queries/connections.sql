-- The pool's own statements about its connections (dispatcher/store/database.py).

-- name: end_backend
-- End backend $1, a connection of ours lost while its commit was in flight, and wait up to $2
-- ms until it is gone: from then on what it did is final (a commit in progress finishes
-- first; bytes it had not read yet are never read). True once it is gone (or already was);
-- false when it still was after $2 ms. Only a backend of this role (the pid reused by
-- another's would be left alone), never this session's own.
SELECT coalesce(bool_and(pg_terminate_backend(pid, $2)), true)
FROM pg_stat_activity
WHERE pid = $1 AND usename = current_user AND pid <> pg_backend_pid()

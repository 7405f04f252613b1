-- Wake-ups between processes (dispatcher/store/database.py sends them, dispatcher/store/
-- notifications.py listens). The channels are named in notifications.py, once.

-- name: notify
-- Wake whoever listens on channel $1 (after the commit that made their work).
SELECT pg_notify($1, '')

-- name: keepalive
-- A cheap round trip that notices a dead connection.
SELECT 1

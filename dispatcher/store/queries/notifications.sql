-- Wake-ups between processes (dispatcher/store/database.py sends them, dispatcher/store/
-- notifications.py listens). The channels are named in notifications.py, once.

-- name: notify
-- Wake whoever listens on channel @channel (after the commit that made their work).
SELECT pg_notify(@channel, '')

-- name: keepalive
-- A cheap round trip that notices a dead connection.
SELECT 1

-- name: try_lead
-- Take the session-level advisory lock @key if it is free (never waits); whether this session
-- holds it. Held until the session ends: the engines' poller election (notifications.py).
SELECT pg_try_advisory_lock(@key)

-- The attempt log, as the API reads it (dispatcher/store/attempts.py). Attempts are written by
-- the engine's `record` statement (queries/queue.sql), one per attempt.

-- name: attempts_page
-- A page of attempts (store/pages.py adds the conditions, the order and the limit).
SELECT id, delivery_id, webhook_id, attempt_number, created_at, response_status,
       response_ms, outcome, error, response_body, trigger
FROM delivery_attempts

-- The attempt log, as the API reads it (dispatcher/store/attempts.py). Attempts are written by
-- the engine's `record` statement (queries/queue.sql), one per attempt.

-- name: delivery_attempts_page
-- The attempts of delivery @delivery_id (created at @delivery_created_at: one partition) to webhook
-- @webhook_id. Paged newest first after (@after_at, @after_id) (store/pages.py: the start when
-- none), @limit rows.
SELECT id, delivery_id, webhook_id, attempt_number, created_at, response_status,
       response_ms, outcome, error, response_body, trigger
FROM delivery_attempts
WHERE delivery_created_at = @delivery_created_at AND delivery_id = @delivery_id
  AND webhook_id = @webhook_id
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- name: webhook_attempts_page
-- Every attempt to webhook @webhook_id with outcome @outcome (NULL: any), started from @since until
-- @until (store/pages.py: open ends as -infinity, infinity). Paged newest first after (@after_at,
-- @after_id) (store/pages.py: the start when none), @limit rows.
SELECT id, delivery_id, webhook_id, attempt_number, created_at, response_status,
       response_ms, outcome, error, response_body, trigger
FROM delivery_attempts
WHERE webhook_id = @webhook_id AND (@outcome::text IS NULL OR outcome = @outcome)
  AND created_at >= @since AND created_at < @until
  AND (created_at, id) < (@after_at, @after_id)
ORDER BY created_at DESC, id DESC
LIMIT @limit

-- The engine's statements (dispatcher/store/queue.py says what the queue is, how a lease holds
-- and how a late result is fenced off): the claim, the record of a batch of attempts, the
-- failure clocks, the release of leases, the heartbeat, and the gauges' reads of the queue.

-- name: index_walks_only
-- The planner settings the engine's statements run under, sent first in their transaction (and
-- by store/stats.py before its window read). They read a handful of rows through indexes,
-- whatever the table sizes: their plans must not depend on statistics, or a database nobody has
-- analyzed (a fresh one with a burst of work; autovacuum never analyzes a partitioned parent)
-- would get plans that read and sort the whole backlog. Until the transaction ends, the planner
-- is left only index scans (a bitmap scan loses the index order; a sequential scan reads
-- everything), and each statement's generic plan (made once per connection, without the
-- values): the custom plans Postgres tries first, five times per connection, are made from
-- the statistics and the arrays' values, and after an ANALYZE they turned the record of 500
-- results from 40 ms into more than a second (and each costs as much planning as the claim's
-- execution).
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL plan_cache_mode = force_generic_plan

-- name: claim_settings
-- Sent first in the claim's transaction (one round trip): `index_walks_only`'s settings, and
-- a commit that does not wait for the WAL flush. A lease that a crash of Postgres loses only
-- hands its row back, due: it is sent again, with the same webhook-id (delivery is at least
-- once), and the record of the attempt made under the lost lease is dropped, as a late one
-- is. Results are recorded with the flush: what a receiver saw is never lost once recorded.
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL synchronous_commit = off

-- name: hand_over_settings
-- Sent with the BEGIN of a hand-over: the claim's settings (`claim_settings`), and joins by
-- nested loops only. Its rows are a few, found by key; a plan that hashes them would read the
-- endpoint's whole queue to build the hash (from a generic plan's guess of the rows).
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL enable_hashjoin = off;
SET LOCAL enable_mergejoin = off;
SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL synchronous_commit = off

-- name: claim
-- Lease up to @limit due rows to engine @owner, visiting the endpoints that have due work in turn
-- (a round robin over endpoint ids: up to @visits of them after the engine's cursor @cursor, which
-- wraps around), each taking at most its free slots (counted across every engine;
-- @default_concurrency for an endpoint without max_concurrency of its own), oldest due first, and
-- for a rate-limited one no more than the whole tokens in its bucket; of an ordering lane, only its
-- head. However deep one endpoint's backlog, every other endpoint with due work is reached within
-- one turn of the ring, and a claim reads about as many rows as it takes. @done_endpoints, with
-- @done_counts: the endpoints where this engine has that many attempts over
-- whose results it has not yet written (their rows stay leased until the record; their slots are
-- free: a slot is busy only while its request is). A visited row whose event was expunged, or whose
-- webhook is disabled or deleted, is given up instead. A fifo endpoint is claimed by one
-- transaction at a time (`elsewhere`). Returns each leased row with all that sending it needs, its
-- place in the deal (`deal`, `ring_pos`), whether its endpoint is fifo (`serialised`:
-- `trim_serialised` follows) and its endpoint's rate limit (`rate_limit`) and the rate the receiver's
-- 429s adapted (`adapted_rate`, NULL: none; flow_control.sql), which granted it, and on
-- every row (one row with the rest NULL when nothing was leased) the ring's last visited endpoint
-- and how many it visited, so that the engine moves its cursor on.
WITH finishing AS (
    -- This engine's attempts that are over but not yet recorded, per endpoint: their rows
    -- are still leased (the record needs the lease), but their slots are free again. (Never
    -- more than the leases the engine holds there: it frees only its own.)
    SELECT f.webhook_id, f.n
    FROM unnest(@done_endpoints::text[], @done_counts::int[]) AS f(webhook_id, n)
), leases AS (
    -- Requests in flight per endpoint, across every engine (its leased rows, read through
    -- the index of leased rows), but for this engine's finished ones: an endpoint's busy
    -- slots. Counted once, before the walk, and read by every step below.
    SELECT l.webhook_id,
           count(*) - least(coalesce(min(f.n), 0), count(*) FILTER (WHERE l.lease_owner = @owner))
               AS n
    FROM delivery_queue l
    LEFT JOIN finishing f ON f.webhook_id = l.webhook_id
    WHERE l.lease_owner IS NOT NULL
    GROUP BY l.webhook_id
), saturated AS (
    -- Endpoints whose every slot is taken. They are passed by, so that a slow or hanging
    -- endpoint's backlog never fills a claim.
    SELECT s.webhook_id
    FROM leases s
    JOIN webhooks w ON w.id = s.webhook_id
    WHERE s.n >= coalesce(w.max_concurrency, @default_concurrency)
), limited AS (
    -- Rate-limited endpoints with no request left to start until later (webhook_rates): the
    -- claim passes their backlog by too, as a saturated one's. Read through the index: only
    -- the endpoints waiting now.
    SELECT r.webhook_id FROM webhook_rates r WHERE r.ready_at > statement_timestamp()
), ring AS (
    -- The next @visits endpoints with anything queued, after @cursor: a loose scan of
    -- delivery_queue_webhook, one index descent per endpoint, however many rows each one has
    -- (leased, parked or due later included). Each descent lands on the endpoint's earliest
    -- due time (the index's order within an endpoint): whether it has due work comes with it.
    WITH RECURSIVE ring(webhook_id, first_due, pos) AS (
        (SELECT q.webhook_id, q.due_at, 1 FROM delivery_queue q
         WHERE q.webhook_id > @cursor
         ORDER BY q.webhook_id, q.due_at LIMIT 1)
        UNION ALL
        SELECT next.webhook_id, next.due_at, ring.pos + 1
        FROM ring
        CROSS JOIN LATERAL (
            SELECT q.webhook_id, q.due_at FROM delivery_queue q
            WHERE q.webhook_id > ring.webhook_id
            ORDER BY q.webhook_id, q.due_at LIMIT 1
        ) next
        WHERE ring.pos < @visits
    )
    SELECT webhook_id, first_due, pos FROM ring
), elsewhere AS MATERIALIZED (
    -- Fifo endpoints another transaction is claiming from right now: passed by, this time.
    -- A claim at a fifo endpoint reads more rows than its free slots (to park lanes in bulk),
    -- so two claims there at once would each find lanes' heads the other does not hold, and
    -- each take the free slots. So they are claimed by one transaction at a time: each visited
    -- fifo endpoint with due work and a free slot is locked here (an advisory lock until the
    -- commit, never waited for), before any of its rows is read. Materialized, so that every
    -- lock is tried once, before the walk. (The claim's snapshot may still predate the last
    -- holder's commit: `trim_serialised`, sent next under the same locks, corrects that.)
    SELECT v.webhook_id
    FROM ring v
    JOIN webhooks w ON w.id = v.webhook_id
    WHERE CASE WHEN w.ordering = 'fifo' AND v.first_due <= @now
                    AND v.webhook_id NOT IN (SELECT webhook_id FROM saturated)
                    AND v.webhook_id NOT IN (SELECT webhook_id FROM limited)
               THEN NOT pg_try_advisory_xact_lock(hashtext('dispatcher_fifo_claim'),
                                                  hashtext(v.webhook_id))
               ELSE false
          END
), due AS (
    -- Each visited endpoint's due rows, oldest first, as many as its free slots; of those, at
    -- most @limit. Saturated and rate-limited endpoints are passed by. Rows another engine is
    -- claiming right now are skipped, not waited for. A fifo endpoint's are read up to @limit:
    -- all but its lanes' heads are parked below, in bulk rather than a few per claim.
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test, q.expunged, q.lane,
           mine.k AS deal, v.pos AS ring_pos
    FROM ring v
    JOIN webhooks w ON w.id = v.webhook_id AND v.first_due <= @now
    LEFT JOIN leases s ON s.webhook_id = v.webhook_id
    -- What a claim deals each visited endpoint with due work, at most: a row more than an
    -- even share of @limit (the deal stops at @limit anyway: no more is read than it may take).
    CROSS JOIN (
        SELECT (1 + @limit / greatest(count(*), 1))::int AS rows FROM ring WHERE first_due <= @now
    ) share
    CROSS JOIN LATERAL (
        -- (Numbered after the LIMIT: a window over the scan itself would read the backlog.)
        SELECT first.delivery_id, row_number() OVER (ORDER BY first.due_at) AS k
        FROM (
            SELECT m.delivery_id, m.due_at
            FROM delivery_queue m
            WHERE m.webhook_id = v.webhook_id AND m.due_at <= @now
            ORDER BY m.due_at
            LIMIT CASE WHEN w.ordering = 'fifo' THEN @limit
                       ELSE greatest(least(coalesce(w.max_concurrency, @default_concurrency)
                                               - coalesce(s.n, 0),
                                           share.rows), 0)
                  END
        ) first
    ) mine
    JOIN delivery_queue q ON q.delivery_id = mine.delivery_id
    WHERE q.due_at <= @now
      AND v.webhook_id NOT IN (SELECT webhook_id FROM saturated)
      AND v.webhook_id NOT IN (SELECT webhook_id FROM limited)
      AND v.webhook_id NOT IN (SELECT webhook_id FROM elsewhere)
    -- Dealt round the visited endpoints, a row each in turn: when the claim holds fewer rows
    -- than the endpoints' free slots, each gets its share and the turn moves on.
    ORDER BY mine.k, v.pos
    LIMIT @limit
    FOR UPDATE OF q SKIP LOCKED
-- Ordered delivery (delivery_lanes in schema.sql): what the claim does with the fifo rows it
-- walked (`lane` not NULL; none in the common case, and then these steps read nothing).
), walked_lanes AS (
    -- The lanes of the rows walked, as this statement's snapshot knows them.
    SELECT d.webhook_id, d.lane,
           EXISTS (SELECT 1 FROM delivery_lanes l
                   WHERE l.webhook_id = d.webhook_id AND l.lane = d.lane) AS known
    FROM (SELECT DISTINCT webhook_id, lane FROM due WHERE lane IS NOT NULL) d
), held_lanes AS (
    -- Known lanes, locked: their head as it is now. A lane another claim or a record holds
    -- is left alone (its rows neither taken nor parked by this claim).
    SELECT l.webhook_id, l.lane, l.head_id
    FROM walked_lanes k
    CROSS JOIN LATERAL (
        SELECT * FROM delivery_lanes l
        WHERE l.webhook_id = k.webhook_id AND l.lane = k.lane
        FOR UPDATE SKIP LOCKED
    ) l
    WHERE k.known
), made_lanes AS (
    -- New lanes, headed by their first member (made by another claim meanwhile: left alone).
    INSERT INTO delivery_lanes (webhook_id, lane, head_id)
    SELECT k.webhook_id, k.lane,
           (SELECT m.delivery_id FROM delivery_queue m
            WHERE m.webhook_id = k.webhook_id AND m.lane = k.lane
            ORDER BY m.lane_seq LIMIT 1)
    FROM walked_lanes k
    WHERE NOT k.known
    ORDER BY k.webhook_id, k.lane
    ON CONFLICT DO NOTHING
    RETURNING webhook_id, lane, head_id
), heads AS (
    -- The head of each lane this claim holds. A head no longer in the queue (given up on a
    -- disable or a delete) is replaced by the lane's first member.
    SELECT webhook_id, lane, head_id, false AS named FROM made_lanes
    UNION ALL
    SELECT h.webhook_id, h.lane,
           CASE WHEN h.queued THEN h.head_id
                ELSE (SELECT m.delivery_id FROM delivery_queue m
                      WHERE m.webhook_id = h.webhook_id AND m.lane = h.lane
                      ORDER BY m.lane_seq LIMIT 1)
           END,
           NOT h.queued
    FROM (
        SELECT held_lanes.*,
               EXISTS (SELECT 1 FROM delivery_queue s WHERE s.delivery_id = head_id) AS queued
        FROM held_lanes
    ) h
), renamed AS (
    UPDATE delivery_lanes l
    SET head_id = heads.head_id
    FROM heads
    WHERE heads.named AND heads.head_id IS NOT NULL
      AND l.webhook_id = heads.webhook_id AND l.lane = heads.lane
), woken AS (
    -- A head named so may have been parked: it is due now. (Parked: `due_at` infinite, read
    -- off the row found by its id; as an index condition it would walk every parked row.)
    UPDATE delivery_queue q
    SET due_at = @now
    FROM heads
    WHERE heads.named AND q.delivery_id = heads.head_id
      AND NOT isfinite(q.due_at) AND q.lease_owner IS NULL
), parked AS (
    -- The rows walked that are not their lane's head wait out of the due walk until it
    -- settles (dispatcher_advance_lanes).
    UPDATE delivery_queue q
    SET due_at = 'infinity'
    FROM due
    JOIN heads ON heads.webhook_id = due.webhook_id AND heads.lane = due.lane
    WHERE q.delivery_id = due.delivery_id AND due.delivery_id IS DISTINCT FROM heads.head_id
), ranked AS (
    -- Per endpoint, only as many rows as it has free slots. A row whose event was expunged,
    -- or whose webhook was disabled or deleted, gets `stopped` (why it is given up): such
    -- rows come up only when a lease taken before the expunge or the disable was handed back
    -- unrecorded (its engine died or stopped), since both settle every row not in flight at
    -- once. A lane's row is a candidate only as its head.
    -- `rate_limit`: the effective rate, as the receiver's 429s adapted it (flow control,
    -- domain/flow_control.py), else the endpoint's own.
    SELECT q.delivery_id, q.webhook_id, q.due_at,
           coalesce(w.adapted_rate, w.rate_limit) AS rate_limit, q.deal, q.ring_pos,
           row_number() OVER (PARTITION BY q.webhook_id
                              ORDER BY q.due_at, q.delivery_id) AS rank,
           coalesce(w.max_concurrency, @default_concurrency) - coalesce(busy.n, 0) AS free,
           -- Why the row is given up instead of attempted (NULL: it goes on), in the words
           -- its last error gets; the record's `stop` gives a retry up for the same reasons
           -- (tests/store/test_queries.py checks they agree).
           CASE WHEN q.expunged THEN 'expunged'
                WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND NOT q.is_test THEN 'webhook disabled'
           END AS stopped
    FROM due q
    JOIN webhooks w ON w.id = q.webhook_id
    LEFT JOIN leases busy ON busy.webhook_id = q.webhook_id
    WHERE q.lane IS NULL OR q.delivery_id IN (SELECT head_id FROM heads)
-- Rate limits (webhook_rates in schema.sql): a limited endpoint gets no more rows than its
-- bucket holds. A bucket another engine is taking from right now is skipped: nothing goes to
-- that endpoint from this claim. 0.03: the bucket's catch-up, in seconds (how late a claim may
-- come for an endpoint's next request and still start it; B = 1 + R x 0.03).
), buckets AS (
    -- `tokens`: what the bucket holds now, min(B, 1 + R (t - ready_at)), whole ones.
    SELECT b.*,
           floor(greatest(0, least(1 + b.rate_limit * 0.03,
                                   1 + b.rate_limit * (extract(epoch FROM b.at)
                                                       - extract(epoch FROM b.ready_at)))))
               AS tokens
    FROM (
        SELECT r.webhook_id, r.ready_at, k.rate_limit, clock_timestamp() AS at
        FROM (SELECT DISTINCT webhook_id, rate_limit FROM ranked
              WHERE rate_limit IS NOT NULL) k
        CROSS JOIN LATERAL (
            SELECT * FROM webhook_rates r
            WHERE r.webhook_id = k.webhook_id
            FOR UPDATE SKIP LOCKED
        ) r
    ) b
), taken AS (
    -- What this claim takes from each bucket (as the lease below counts it).
    UPDATE webhook_rates r
    SET ready_at = greatest(b.ready_at, b.at - interval '0.03 seconds')
                   + make_interval(secs => g.n::float8 / b.rate_limit)
    FROM buckets b
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM ranked
        WHERE ranked.webhook_id = b.webhook_id AND ranked.stopped IS NULL
          AND ranked.rank <= least(ranked.free, b.tokens)
    ) g
    WHERE r.webhook_id = b.webhook_id AND g.n > 0
), given_up AS (
    DELETE FROM delivery_queue q
    USING ranked
    WHERE q.delivery_id = ranked.delivery_id AND ranked.stopped IS NOT NULL
    RETURNING q.delivery_id, q.created_at, ranked.stopped
), settled AS (
    UPDATE deliveries d
    SET status = 'failed', last_error = g.stopped, next_attempt_at = NULL
    FROM given_up g
    WHERE d.id = g.delivery_id AND d.created_at = g.created_at
), leased AS (
    -- The lease: out of the due walk until the record (or a release) puts it back.
    UPDATE delivery_queue q
    SET lease_owner = @owner, due_at = 'infinity'
    FROM ranked LEFT JOIN buckets ON buckets.webhook_id = ranked.webhook_id, webhooks w, events e
    WHERE q.delivery_id = ranked.delivery_id
      AND ranked.stopped IS NULL
      AND ranked.rank <= CASE WHEN ranked.rate_limit IS NULL THEN ranked.free
                              ELSE least(ranked.free, coalesce(buckets.tokens, 0)) END
      AND w.id = q.webhook_id
      AND e.id = q.event_id
      AND e.created_at = q.created_at
    RETURNING q.delivery_id, q.webhook_id, q.attempts, q.is_test, ranked.due_at,
              e.payload, e.created_at AS event_created_at, w.secret, w.previous_secret,
              w.previous_secret_expires_at, coalesce(w.max_concurrency, @default_concurrency) AS concurrency,
              q.event_id, e.trace_context, w.headers || w.secret_headers AS custom_headers,
              q.lane IS NOT NULL AS in_lane, w.ordering = 'fifo' AS serialised, ranked.deal,
              ranked.ring_pos, w.adapted_rate,
              -- The endpoint's options, all of them (store/webhooks.py writes its one column
              -- list in here: the engine gets them as one EndpointOptions).
              {options}
)
-- Every leased row, with where the ring ended; one row of NULLs but those when none was.
SELECT leased.*, ring_end.webhook_id AS ring_end, ring_end.visited
FROM (SELECT max(webhook_id) AS webhook_id, count(*) AS visited FROM ring) ring_end
LEFT JOIN leased ON true

-- name: hand_over
-- Slots handed on (docs/delivery.md, "Slots handed on"): engine @owner's attempts @done_ids are
-- over, their rows still leased to it (their results not yet recorded); each of their endpoints
-- gets as many of its next due rows as slots handed there, oldest first, leased to @owner, so
-- that a slot goes from one request to the next without waiting for a claim. Each handed row
-- is locked until the commit: the record that unleases it waits, so at every moment a slot is
-- held by the old row or by the new one, and no claim anywhere counts it free in between. A
-- handed row that is not leased to @owner any more (recorded already), or that a record is
-- writing now (locked), hands on nothing. Nothing here waits for a lock. Only plain endpoints
-- take part (no rate limit, adapted or its own; not fifo; neither disabled nor deleted), and
-- an endpoint never gets more than its limit allows, every engine's leases counted. Returns
-- each leased row as the claim does.
WITH handed AS (
    -- The handed rows still leased to this engine, locked (skipped when a record has them).
    SELECT q.delivery_id, q.webhook_id
    FROM delivery_queue q
    WHERE q.delivery_id = ANY(@done_ids::text[]) AND q.lease_owner = @owner
    FOR UPDATE SKIP LOCKED
), slots AS (
    -- Per endpoint, the slots handed there: one new row for each (a slot goes from a finished
    -- request to a new one), fewer only when its limit was lowered beneath the requests in
    -- flight: its leased rows, less this engine's other finished ones (@done_endpoints with
    -- @done_counts, those being recorded included) and the handed ones.
    SELECT h.webhook_id,
           least(h.n, coalesce(w.max_concurrency, @default_concurrency) - (busy.n - h.n)) AS n
    FROM (SELECT webhook_id, count(*) AS n FROM handed GROUP BY webhook_id) h
    JOIN webhooks w ON w.id = h.webhook_id
    CROSS JOIN LATERAL (
        SELECT count(*) - least(coalesce(min(f.n), 0),
                                count(*) FILTER (WHERE l.lease_owner = @owner) - h.n) AS n
        FROM delivery_queue l
        LEFT JOIN unnest(@done_endpoints::text[], @done_counts::int[]) AS f(webhook_id, n)
               ON f.webhook_id = l.webhook_id
        WHERE l.webhook_id = h.webhook_id AND l.lease_owner IS NOT NULL
    ) busy
    WHERE w.rate_limit IS NULL AND w.adapted_rate IS NULL AND w.ordering = 'none'
      AND w.disabled_at IS NULL AND w.deleted_at IS NULL
), next AS (
    -- Each endpoint's next due rows, oldest first; rows another claim holds are skipped.
    SELECT n.delivery_id, n.due_at
    FROM slots s
    CROSS JOIN LATERAL (
        SELECT m.delivery_id, m.due_at
        FROM delivery_queue m
        WHERE m.webhook_id = s.webhook_id AND m.due_at <= @now
          AND m.lease_owner IS NULL AND NOT m.expunged AND m.lane IS NULL
        ORDER BY m.due_at
        LIMIT greatest(s.n, 0)
        FOR UPDATE SKIP LOCKED
    ) n
)
UPDATE delivery_queue q
SET lease_owner = @owner, due_at = 'infinity'
FROM next, webhooks w, events e
WHERE q.delivery_id = next.delivery_id
  AND w.id = q.webhook_id
  AND e.id = q.event_id
  AND e.created_at = q.created_at
RETURNING q.delivery_id, q.webhook_id, q.attempts, q.is_test, next.due_at,
          e.payload, e.created_at AS event_created_at, w.secret, w.previous_secret,
          w.previous_secret_expires_at, coalesce(w.max_concurrency, @default_concurrency) AS concurrency,
          q.event_id, e.trace_context, w.headers || w.secret_headers AS custom_headers,
          false AS in_lane, w.adapted_rate,
          -- The endpoint's options, as the claim returns them.
          {options}

-- name: trim_serialised
-- Sent after a claim that leased rows of fifo endpoints, in its transaction, so under their locks
-- (`elsewhere` above), with a snapshot of its own: taken after those locks, so it sees every lease
-- committed by the claims that held them before. The claim counted the slots from its own snapshot,
-- which may predate the last holder's commit; here, per endpoint, the rows it leased beyond the
-- free slots (counted as the claim counts them: @done_endpoints and @done_counts this engine's
-- finished attempts; @default_concurrency the default limit) are handed back, newest first, due
-- again when they were (@delivery_ids, @due_at: each row leased and its due time). @owner the
-- engine. Returns the rows handed back. Exact: only a claim holding an endpoint's lock adds leases
-- there.
WITH mine AS (
    SELECT m.delivery_id, m.due_at, q.webhook_id
    FROM unnest(@delivery_ids::text[], @due_at::timestamptz[]) AS m(delivery_id, due_at)
    JOIN delivery_queue q ON q.delivery_id = m.delivery_id AND q.lease_owner = @owner
), busy AS (
    -- Requests in flight at those endpoints, as `leases` in the claim counts them.
    SELECT l.webhook_id,
           count(*) - least(coalesce(min(f.n), 0), count(*) FILTER (WHERE l.lease_owner = @owner))
               AS n
    FROM delivery_queue l
    LEFT JOIN unnest(@done_endpoints::text[], @done_counts::int[]) AS f(webhook_id, n)
           ON f.webhook_id = l.webhook_id
    WHERE l.lease_owner IS NOT NULL AND l.webhook_id IN (SELECT webhook_id FROM mine)
    GROUP BY l.webhook_id
), excess AS (
    SELECT m.delivery_id, m.due_at
    FROM (SELECT mine.*, row_number() OVER (PARTITION BY webhook_id
                                            ORDER BY due_at DESC, delivery_id DESC) AS k
          FROM mine) m
    JOIN busy b ON b.webhook_id = m.webhook_id
    JOIN webhooks w ON w.id = m.webhook_id
    WHERE m.k <= b.n - coalesce(w.max_concurrency, @default_concurrency)
)
UPDATE delivery_queue q
SET lease_owner = NULL, due_at = excess.due_at
FROM excess
WHERE q.delivery_id = excess.delivery_id AND q.lease_owner = @owner
RETURNING q.delivery_id

-- name: record
-- Write a batch of attempts' results, one element per result in each array: @ids the
-- deliveries, @statuses their statuses as decided, @response_statuses, @response_ms (the
-- response times), @last_errors, @delivered_at, @next_attempt_at (when each is retried),
-- @attempts_before (each delivery's attempts when claimed), @started_at (when each attempt
-- started), @outcomes, @response_bodies (the answers' first bytes). Only the attempts engine
-- @owner still holds are written (a late result is dropped): the attempt log, the queue row
-- (settled: gone; retried: due again, unleased) and the delivery. Returns each delivery
-- written, with `stop` (why a retry was given up instead, if it was) and what its operational
-- events need.
WITH r AS (
    SELECT *
    FROM unnest(@ids::text[], @statuses::text[], @response_statuses::int[],
                @response_ms::int[], @last_errors::text[], @delivered_at::timestamptz[],
                @next_attempt_at::timestamptz[], @attempts_before::int[],
                @started_at::timestamptz[], @outcomes::text[], @response_bodies::text[])
         AS r(id, status, response_status, response_ms, last_error, delivered_at,
              next_attempt_at, attempts_before, started_at, outcome, response_body)
), held AS (
    -- Only results of attempts this engine still holds: a late one (its lease was handed
    -- back, the row claimed again or settled) is dropped.
    SELECT q.delivery_id, q.created_at, q.webhook_id, q.trigger, q.expunged, r.*,
           -- Given up for the claim's reasons (its `stopped`): expunged, webhook deleted or
           -- disabled (a test is sent to a disabled webhook even so).
           CASE WHEN q.expunged THEN 'expunged'
                WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND NOT q.is_test THEN 'webhook disabled'
           END AS stop
    FROM r
    JOIN delivery_queue q ON q.delivery_id = r.id
    JOIN webhooks w ON w.id = q.webhook_id
    -- (IS NOT DISTINCT FROM: not an index condition, so the rows are found from the results
    -- by primary key, never by walking every lease, whatever the statistics say.) Locked in
    -- id order, as an expunge locks its event's rows (store/expunge.py): never a deadlock.
    WHERE q.lease_owner IS NOT DISTINCT FROM @owner AND q.attempts = r.attempts_before
    ORDER BY q.delivery_id
    FOR UPDATE OF q
), final AS (
    -- An attempt that was made is always counted and its outcome written, as decided
    -- (domain/outcomes.py). A retry it would have scheduled is given up instead when its
    -- event was expunged (GiveUpReason.EXPUNGED), or its webhook disabled (test deliveries
    -- excepted, as in the claim) or deleted (GiveUpReason.DISABLED), while the attempt was in
    -- flight: only the database knows it now. An expunged event's answer is not kept.
    SELECT delivery_id, created_at, webhook_id, trigger, started_at, outcome, stop,
           CASE WHEN expunged THEN NULL ELSE response_body END AS response_body,
           response_status, response_ms, delivered_at,
           attempts_before + 1 AS attempts,
           CASE WHEN status = 'pending' AND stop IS NOT NULL THEN 'failed'
                ELSE status END AS status,
           CASE WHEN status = 'pending' AND stop IS NOT NULL
                THEN last_error || ' (' || stop || ')' ELSE last_error END AS last_error,
           CASE WHEN status = 'pending' AND stop IS NOT NULL THEN NULL
                ELSE next_attempt_at END AS next_attempt_at
    FROM held
), logged AS (
    -- The attempt log: every attempt written, as it happened (its error in lastError's words).
    INSERT INTO delivery_attempts (id, delivery_id, webhook_id, delivery_created_at,
                                   attempt_number, created_at, response_status, response_ms,
                                   outcome, error, response_body, trigger)
    SELECT dispatcher_new_id('WA'), delivery_id, webhook_id, created_at, attempts, started_at,
           response_status, response_ms, outcome, last_error, response_body, trigger
    FROM final
), settled AS (
    DELETE FROM delivery_queue q
    USING final f
    WHERE q.delivery_id = f.delivery_id AND f.status <> 'pending'
), again AS (
    UPDATE delivery_queue q
    SET due_at = f.next_attempt_at, attempts = f.attempts, lease_owner = NULL,
        trigger = 'schedule'
    FROM final f
    WHERE q.delivery_id = f.delivery_id AND f.status = 'pending'
)
UPDATE deliveries d
SET attempts = f.attempts,
    status = f.status,
    response_status = f.response_status,
    response_ms = f.response_ms,
    last_error = f.last_error,
    delivered_at = f.delivered_at,
    next_attempt_at = f.next_attempt_at
FROM final f
WHERE d.id = f.delivery_id AND d.created_at = f.created_at
RETURNING d.id, d.status, d.created_at, f.stop, d.workspace_id, d.event_id, d.event_type,
          d.attempts, d.last_error,
          -- Whether an earlier attempt failed (a delivered one may be worth a
          -- delivery.recovered): a retry on the schedule follows a failure; after a manual
          -- retry or a recover, the attempt log says (read only for those, by its key).
          CASE WHEN d.status <> 'delivered' OR d.attempts = 1 THEN false
               WHEN f.trigger = 'schedule' THEN true
               ELSE EXISTS (SELECT 1 FROM delivery_attempts a
                            WHERE a.delivery_id = d.id AND a.delivery_created_at = d.created_at
                              AND a.attempt_number < d.attempts AND a.outcome <> 'success')
          END AS failed_before

-- name: update_failure_clocks
-- Execute the failure clocks' changes (`outcomes.ClockChange`), one element per webhook in each
-- array, in id order: @webhook_ids the webhook; @resets a reset (set the clock to @failing_since:
-- the first failure after the last success, or NULL), else a start (set it to @failing_since only
-- when it is not running).
UPDATE webhooks w
SET failing_since = CASE WHEN u.reset THEN u.fail_start
                         ELSE coalesce(w.failing_since, u.fail_start) END
FROM unnest(@webhook_ids::text[], @resets::bool[], @failing_since::timestamptz[])
     AS u(id, reset, fail_start)
WHERE w.id = u.id
  -- Only rows whose clock really changes: a healthy endpoint's row is not rewritten per flush.
  AND w.failing_since IS DISTINCT FROM
      (CASE WHEN u.reset THEN u.fail_start ELSE coalesce(w.failing_since, u.fail_start) END)

-- name: lock_webhooks
-- Lock webhooks @ids for the record's changes (failure clocks, disabling), in id order, before
-- any of them is written: the record's own statements then lock none it does not hold, so two
-- records (or a record and a change through the API, which locks its one webhook first) never
-- wait for each other in a circle. FOR NO KEY UPDATE: what an UPDATE of them takes anyway.
SELECT id FROM webhooks WHERE id = ANY(@ids::text[]) ORDER BY id FOR NO KEY UPDATE

-- name: read_failure_clocks
-- The failure clock (`failing_since`) of each of webhooks @maybe_failing, as the record's
-- transaction has just set it.
SELECT id, failing_since FROM webhooks WHERE id = ANY(@maybe_failing::text[])

-- name: advance_lanes
-- Move on the lanes whose head is among the deliveries @settled_heads a record has just settled:
-- their next delivery heads them, due at @now, or the lane goes (functions.sql,
-- dispatcher_advance_lanes).
SELECT dispatcher_advance_lanes(@settled_heads::text[], @now)

-- name: release
-- Hand back engine @owner's leases of deliveries @delivery_ids, which it will not attempt
-- (shutdown): due at @now. Returns (as its status) how many.
UPDATE delivery_queue SET lease_owner = NULL, due_at = @now
WHERE delivery_id = ANY(@delivery_ids::text[]) AND lease_owner = @owner

-- name: release_unheld
-- Hand back engine @owner's leases of every delivery but @held (those it is attempting, or whose
-- results it still has to write): leases it holds without knowing, from a claim that committed
-- but whose answer never came back (a connection cut). Due at @now. Returns (as its status) how
-- many. Through the partial index of leased rows.
UPDATE delivery_queue SET lease_owner = NULL, due_at = @now
WHERE lease_owner = @owner AND delivery_id <> ALL(@held::text[])

-- name: beat
-- Say engine @owner is alive, now (database time); returns whether it was not known as alive
-- before this beat (a new row rather than an update). A statement of its own, on the engine's
-- own row only: no other engine's locks stand in its way (the take-over below is apart, so a
-- stalled engine's locks can never stop a live one from beating).
INSERT INTO dispatcher_engines (owner) VALUES (@owner)
ON CONFLICT (owner) DO UPDATE SET beat_at = now()
RETURNING (xmax = 0) AS registered

-- name: take_over_lock_wait
-- Sent first in the take-over's transaction: a lock it would wait for (a table lock of a
-- migration, say) ends it at once; the next beat tries again. Row locks are skipped, not
-- waited for (below).
SET LOCAL lock_timeout = '200ms'

-- name: take_over
-- Forget the engines silent for longer than @dead_after seconds, and hand back their leases, and
-- any whose owner is not a live engine: due at @now. Returns each lease handed back, with the
-- engine that held it. Nothing here waits for another transaction: a row that one holds (a stalled
-- engine's transaction, its backend "idle in transaction" until Postgres ends it after
-- idle_in_transaction_session_timeout, database.engine_session) is left for a later beat.
WITH dead AS (
    -- Engines silent for longer than the timeout (database time: one clock for every replica).
    -- A row being written (its engine beating right now) is alive: skipped.
    DELETE FROM dispatcher_engines
    WHERE owner IN (SELECT e.owner FROM dispatcher_engines e
                    WHERE e.beat_at < now() - make_interval(secs => @dead_after)
                    FOR UPDATE SKIP LOCKED)
), orphaned AS (
    -- Every lease whose owner is not a live engine, through the index of leased rows; a row
    -- another transaction holds (a record in progress) is skipped.
    SELECT q.delivery_id, q.lease_owner
    FROM delivery_queue q
    WHERE q.lease_owner IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM dispatcher_engines e
          WHERE e.owner = q.lease_owner AND e.beat_at >= now() - make_interval(secs => @dead_after)
      )
    FOR UPDATE OF q SKIP LOCKED
)
-- Their leases go back: due at once.
UPDATE delivery_queue q
SET lease_owner = NULL, due_at = @now
FROM orphaned o
WHERE q.delivery_id = o.delivery_id
RETURNING o.lease_owner AS owner

-- name: forget_engine
-- Forget engine @owner (at the end of a clean stop).
DELETE FROM dispatcher_engines WHERE owner = @owner

-- name: release_held
-- Hand back every lease engine @owner still holds (results it could not write): due at @now.
-- Returns (as its status) how many.
UPDATE delivery_queue SET lease_owner = NULL, due_at = @now WHERE lease_owner = @owner

-- name: due_summary
-- How many rows are due at @now (counted up to @cap), and the oldest due time: through the due
-- index, capped so that a huge backlog stays cheap to gauge.
SELECT count(*) AS n, min(due_at) AS oldest FROM (
    SELECT due_at FROM delivery_queue WHERE due_at <= @now
    ORDER BY due_at LIMIT @cap) due

-- name: held_summary
-- What waits for its endpoint rather than for an engine, at @now: for each endpoint with queued
-- rows (a loose scan of delivery_queue_webhook, one descent per endpoint, at most @endpoints_cap of
-- them, in id order), its oldest due time when it has due work, and why no engine may take that
-- work now: 'rate_limit' when its bucket was taken from within the last second (engines are
-- draining it at its rate; a bucket left untouched longer means nobody claims), else 'concurrency'
-- when every slot is leased, else NULL (an engine would claim it). Returns, per reason (NULL:
-- none), how many endpoints, their due rows (counted up to @due_cap per endpoint) and the oldest
-- due time; plus one row 'fifo': the rows parked behind their lane's head (up to @due_cap).
-- @default_concurrency: the concurrency of an endpoint without max_concurrency.
WITH RECURSIVE ring (webhook_id, first_due, n) AS (
    (SELECT q.webhook_id, q.due_at, 1 FROM delivery_queue q
     ORDER BY q.webhook_id, q.due_at LIMIT 1)
    UNION ALL
    SELECT next.webhook_id, next.due_at, ring.n + 1
    FROM ring
    CROSS JOIN LATERAL (
        SELECT q.webhook_id, q.due_at FROM delivery_queue q
        WHERE q.webhook_id > ring.webhook_id
        ORDER BY q.webhook_id, q.due_at LIMIT 1
    ) next
    WHERE ring.n < @endpoints_cap
), judged AS (
    SELECT v.webhook_id, v.first_due,
           CASE WHEN EXISTS (SELECT 1 FROM webhook_rates r
                             WHERE r.webhook_id = v.webhook_id
                               AND r.ready_at > @now::timestamptz - interval '1 second')
                     AND coalesce(w.adapted_rate, w.rate_limit) IS NOT NULL
                THEN 'rate_limit'
                WHEN (SELECT count(*) FROM delivery_queue l
                      WHERE l.webhook_id = v.webhook_id AND l.lease_owner IS NOT NULL)
                     >= coalesce(w.max_concurrency, @default_concurrency) THEN 'concurrency'
           END AS reason
    FROM ring v
    LEFT JOIN webhooks w ON w.id = v.webhook_id
    WHERE v.first_due <= @now
)
SELECT j.reason, count(*) AS endpoints, min(j.first_due) AS oldest,
       sum(CASE WHEN j.reason IS NULL THEN 0 ELSE (
           SELECT count(*) FROM (SELECT 1 FROM delivery_queue m
                                 WHERE m.webhook_id = j.webhook_id AND m.due_at <= @now
                                 LIMIT @due_cap) c) END) AS rows
FROM judged j
GROUP BY j.reason
UNION ALL
SELECT 'fifo', NULL, NULL, count(*) FROM (
    SELECT 1 FROM delivery_queue p
    WHERE p.due_at = 'infinity' AND p.lease_owner IS NULL AND p.lane IS NOT NULL
    LIMIT @due_cap) parked

-- name: any_due
-- Whether any unleased row is due at @now, reading one index entry: the probe an idle engine sends
-- often, so that a delivery made due by any door (even the SQL outbox) starts at once.
SELECT EXISTS (SELECT 1 FROM delivery_queue WHERE due_at <= @now AND lease_owner IS NULL)

-- name: watch_due
-- The poller's wait (dispatcher_watch_due in functions.sql): what is due once it differs from what
-- the poller saw last (@due rows, @newest the newest due time), or after @for_seconds seconds,
-- probing every @probe_seconds seconds at the database's clock plus @skew; counting at most the
-- newest @cap due rows.
SELECT due, newest
FROM dispatcher_watch_due(@due, @newest, @skew, @probe_seconds, @for_seconds, @cap)

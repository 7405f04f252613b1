"""The engine's statements: claim due deliveries, record attempts in batches, release leases,
and the heartbeat that hands a dead engine's leases back.

The engine works on `delivery_queue` (schema.sql): one narrow row per pending delivery. A
claim sets `lease_owner` and moves `due_at` to 'infinity', so a claimed row leaves the due
walk. A lease holds while its engine beats (`dispatcher_engines`); when an engine stops
beating, any live engine hands its rows back, due at once. A result is recorded only by the
claim that holds the row (`lease_owner` and `attempts` match), so a late result from an engine
whose leases were handed back can never overwrite a newer one. The history (`deliveries`) is
written once per attempt, by the recorder, in the same statement.

What a result means (delivered, retried when, given up, the endpoint's failure clock and its
disabling) is decided in `dispatcher.domain.outcomes`; `record` only executes the decisions.

Two per-endpoint controls live in the claim too (docs/delivery.md): a rate limit, a token
bucket per endpoint (`webhook_rates`) that the claim takes from under its row lock; and
ordered delivery, where only the head of each ordering lane (`delivery_lanes`) is claimed, the
other members of the lane are parked out of the due walk, and the record that settles a head
moves its lane on. Both read nothing for endpoints that have neither.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple, TypeAlias

from dispatcher.domain import outcomes
from dispatcher.domain.enums import DeliveryStatus, DisabledReason
from dispatcher.domain.health import Settled
from dispatcher.domain.operational import SettledAttempt, about_attempt
from dispatcher.domain.outcomes import (
    AttemptOutcome,
    Decision,
    Delivered,
    GivenUp,
    GiveUpReason,
    RetryAt,
)
from dispatcher.store import operational, stats, webhooks
from dispatcher.store.database import Connection, Database, Record

# The engine's statements read a handful of rows through indexes, whatever the table sizes.
# Their plans must not depend on statistics: a database nobody has analyzed (a fresh one with
# a burst of work; autovacuum never analyzes a partitioned parent) would otherwise get plans
# that read and sort the whole backlog. Within their transaction, the planner is left only
# index scans (a bitmap scan loses the index order; a sequential scan reads everything).
INDEX_WALKS_ONLY = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"

_SATURATED = """
WITH saturated AS (
    -- Endpoints whose every slot is taken, across every engine (leased rows: requests in
    -- flight). They are left out of the walk below, so that a slow or hanging endpoint's
    -- backlog never fills a claim.
    SELECT l.webhook_id
    FROM delivery_queue l
    JOIN webhooks w ON w.id = l.webhook_id
    WHERE l.lease_owner IS NOT NULL
    GROUP BY l.webhook_id, w.max_concurrency
    HAVING count(*) >= coalesce(w.max_concurrency, $4)
), limited AS (
    -- Rate-limited endpoints with no request left to start until later (webhook_rates): the
    -- walk passes their backlog by too, as a saturated one's. Read through the index: only
    -- the endpoints waiting now.
    SELECT r.webhook_id FROM webhook_rates r WHERE r.ready_at > statement_timestamp()
"""

# Two ways to find due rows; the rest of the claim (slots, leases, what it returns) is shared.
_WALK_HEAD = """
), due AS (
    -- Due rows in due order, walking delivery_queue_due lazily: a claim reads about as many
    -- entries as it takes (plus those of saturated endpoints it passes). Rows another engine
    -- is claiming right now are skipped, not waited for.
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test, q.expunged, q.lane
    FROM delivery_queue q
    WHERE q.due_at <= $1
      AND q.webhook_id NOT IN (SELECT webhook_id FROM saturated)
      AND q.webhook_id NOT IN (SELECT webhook_id FROM limited)
    ORDER BY q.due_at
    LIMIT $3
    FOR UPDATE OF q SKIP LOCKED
"""

_WALK_WINDOW = """
), due AS (
    -- The same walk, within a window of the due index's first $5 entries: when much of the
    -- head of the backlog belongs to saturated endpoints, a claim still reads at most about
    -- twice the window, not the whole backlog.
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test, q.expunged, q.lane
    FROM delivery_queue q
    WHERE q.due_at <= $1
      -- The window's end: the due time of its last entry (NULL: fewer due rows than that).
      AND q.due_at <= coalesce(
          (SELECT w.due_at FROM delivery_queue w WHERE w.due_at <= $1
           ORDER BY w.due_at OFFSET $5 - 1 LIMIT 1),
          $1)
      AND q.webhook_id NOT IN (SELECT webhook_id FROM saturated)
      AND q.webhook_id NOT IN (SELECT webhook_id FROM limited)
    ORDER BY q.due_at
    LIMIT $3
    FOR UPDATE OF q SKIP LOCKED
"""

_WALK_ENDPOINTS = """
), visited AS (
    -- Endpoints beyond the window get their turn: up to $5 live, unsaturated endpoints in id
    -- order from a random point $6 (ids are random, so every endpoint is visited as often),
    -- wrapping around. Run when a head walk came back short: a backlog at the head of the
    -- due index cannot starve the endpoints behind it.
    SELECT id, max_concurrency FROM (
        (SELECT w.id, w.max_concurrency FROM webhooks w
         WHERE w.id >= $6 AND w.deleted_at IS NULL ORDER BY w.id LIMIT $5)
        UNION ALL
        (SELECT w.id, w.max_concurrency FROM webhooks w
         WHERE w.id < $6 AND w.deleted_at IS NULL ORDER BY w.id LIMIT $5)
    ) ring
    WHERE id NOT IN (SELECT webhook_id FROM saturated)
      AND id NOT IN (SELECT webhook_id FROM limited)
    LIMIT $5
), due AS (
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test, q.expunged, q.lane
    FROM visited v
    CROSS JOIN LATERAL (
        SELECT delivery_id FROM delivery_queue
        WHERE webhook_id = v.id AND due_at <= $1
        ORDER BY due_at
        LIMIT coalesce(v.max_concurrency, $4)
    ) mine
    JOIN delivery_queue q ON q.delivery_id = mine.delivery_id
    WHERE q.due_at <= $1
    ORDER BY q.due_at
    LIMIT $3
    FOR UPDATE OF q SKIP LOCKED
"""

# Ordered delivery (delivery_lanes in schema.sql): what the claim does with the fifo rows it
# walked (`lane` not NULL; none in the common case, and then these steps read nothing).
_LANES = """), walked_lanes AS (
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
    SET due_at = $1
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
"""

_BUSY = """), busy AS (
    -- Requests in flight now for the endpoints just walked.
    SELECT l.webhook_id, count(*) AS n
    FROM delivery_queue l
    WHERE l.lease_owner IS NOT NULL AND l.webhook_id IN (SELECT webhook_id FROM due)
    GROUP BY l.webhook_id
"""

_RANKED = """), ranked AS (
    -- Per endpoint, only as many rows as it has free slots. A row whose event was expunged,
    -- or whose webhook was disabled or deleted, gets `stopped` (why it is given up): such
    -- rows come up only when a lease taken before the expunge or the disable was handed back
    -- unrecorded (its engine died or stopped), since both settle every row not in flight at
    -- once. A lane's row is a candidate only as its head.
    SELECT due.delivery_id, due.webhook_id, due.due_at, w.rate_limit,
           row_number() OVER (PARTITION BY due.webhook_id
                              ORDER BY due.due_at, due.delivery_id) AS rank,
           coalesce(w.max_concurrency, $4) - coalesce(busy.n, 0) AS free,
           CASE WHEN due.expunged THEN 'expunged'
                WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND NOT due.is_test THEN 'webhook disabled'
           END AS stopped
    FROM due
    JOIN webhooks w ON w.id = due.webhook_id
    LEFT JOIN busy ON busy.webhook_id = due.webhook_id
    WHERE due.lane IS NULL OR due.delivery_id IN (SELECT head_id FROM heads)
"""

# Rate limits (webhook_rates in schema.sql): a limited endpoint gets no more rows than its
# bucket holds. A bucket another engine is taking from right now is skipped: nothing goes to
# that endpoint from this claim. 0.03: the bucket's catch-up, in seconds (how late a claim may
# come for an endpoint's next request and still start it; B = 1 + R x 0.03).
_RATES = """), buckets AS (
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
"""

_LEASE = """), given_up AS (
    DELETE FROM delivery_queue q
    USING ranked
    WHERE q.delivery_id = ranked.delivery_id AND ranked.stopped IS NOT NULL
    RETURNING q.delivery_id, q.created_at, ranked.stopped
), settled AS (
    UPDATE deliveries d
    SET status = 'failed', last_error = g.stopped, next_attempt_at = NULL
    FROM given_up g
    WHERE d.id = g.delivery_id AND d.created_at = g.created_at
)
UPDATE delivery_queue q
SET lease_owner = $2, due_at = 'infinity'
FROM ranked LEFT JOIN buckets ON buckets.webhook_id = ranked.webhook_id, webhooks w, events e
WHERE q.delivery_id = ranked.delivery_id
  AND ranked.stopped IS NULL
  AND ranked.rank <= CASE WHEN ranked.rate_limit IS NULL THEN ranked.free
                          ELSE least(ranked.free, coalesce(buckets.tokens, 0)) END
  AND w.id = q.webhook_id
  AND e.id = q.event_id
  AND e.created_at = q.created_at
RETURNING q.delivery_id, q.webhook_id, q.attempts, q.is_test, ranked.due_at,
          e.payload, e.created_at AS event_created_at, w.url, w.secret, w.previous_secret,
          w.previous_secret_expires_at, coalesce(w.max_concurrency, $4) AS max_concurrency,
          q.event_id, e.trace_context, w.headers || w.secret_headers AS custom_headers,
          q.lane IS NOT NULL AS in_lane
"""

# The rest of the claim, after the walk: slots, lanes, rates, leases, what it returns.
_CLAIM_REST = _BUSY + _LANES + _RANKED + _RATES + _LEASE


CLAIM = _SATURATED.rstrip() + _WALK_HEAD + _CLAIM_REST
CLAIM_WINDOW = _SATURATED.rstrip() + _WALK_WINDOW + _CLAIM_REST
CLAIM_ENDPOINTS = _SATURATED.rstrip() + _WALK_ENDPOINTS + _CLAIM_REST

RECORD = """
WITH r AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::timestamptz[],
                $7::timestamptz[], $8::int[], $10::timestamptz[], $11::text[], $12::text[])
         AS r(id, status, response_status, response_ms, last_error, delivered_at,
              next_attempt_at, attempts_before, started_at, outcome, response_body)
), held AS (
    -- Only results of attempts this engine still holds: a late one (its lease was handed
    -- back, the row claimed again or settled) is dropped.
    SELECT q.delivery_id, q.created_at, q.webhook_id, q.trigger, q.expunged, r.*,
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
    WHERE q.lease_owner IS NOT DISTINCT FROM $9 AND q.attempts = r.attempts_before
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
"""

# Executes `outcomes.ClockChange`s: a reset sets the clock (to the first failure after the
# last success, or NULL), a start sets it only when it is not running.
FAILING_CLOCK = """
UPDATE webhooks w
SET failing_since = CASE WHEN u.reset THEN u.fail_start
                         ELSE coalesce(w.failing_since, u.fail_start) END
FROM unnest($1::text[], $2::bool[], $3::timestamptz[]) AS u(id, reset, fail_start)
WHERE w.id = u.id
  -- Only rows whose clock really changes: a healthy endpoint's row is not rewritten per flush.
  AND w.failing_since IS DISTINCT FROM
      (CASE WHEN u.reset THEN u.fail_start ELSE coalesce(w.failing_since, u.fail_start) END)
"""


class Claimed(NamedTuple):
    """A delivery this engine holds the lease of, with all it needs to send it."""

    id: str
    webhook_id: str
    attempts: int
    is_test: bool  # a `webhook.test` delivery (still tried while its webhook is disabled)
    due_at: datetime
    payload: bytes
    event_created_at: datetime
    url: str
    secrets: tuple[str, ...]
    max_concurrency: int
    event_id: str
    trace_context: str | None  # the publishing span's W3C traceparent (dispatcher.tracing)
    # The webhook's custom headers, secret ones included (name, value): sent with the attempt.
    custom_headers: tuple[tuple[str, str], ...] = ()
    in_lane: bool = False  # the head of an ordering lane: its settling moves the lane on


class Result(NamedTuple):
    """One attempt and what it was decided to mean (`outcomes.decide`), as it is recorded."""

    id: str  # the delivery's
    webhook_id: str
    attempts_before: int  # the delivery's attempts when claimed: fences off a late result
    response_status: int | None
    response_ms: int
    last_error: str | None  # as `outcomes.last_error` words it
    finished_at: datetime
    decision: Decision
    started_at: datetime  # for the attempt log
    outcome: AttemptOutcome
    response_body: str | None  # the answer's first bytes (DISPATCHER_RESPONSE_EXCERPT_BYTES)
    in_lane: bool = False  # the claim's `in_lane`


# How far the head walk may read, per row asked, and how many endpoints a short claim visits.
HEAD_WINDOW_PER_ROW = 4
ENDPOINTS_PER_VISIT = 16


async def claim(
    db: Database,
    *,
    owner: str,
    now: datetime,
    limit: int,
    default_concurrency: int,
    bounded: bool = False,
) -> list[Claimed]:
    """Lease up to `limit` due deliveries, at most each endpoint's free slots (counted across
    every engine), due order first.

    `bounded` is for when much of the backlog's head belongs to saturated endpoints (the
    engine decides, from a claim that found nothing after a long walk): the walk stops at
    a window, and a claim that comes back short then visits a few endpoints from a random
    point, so that every endpoint with due work gets its turn.
    """
    async with db.transaction() as conn:
        await conn.execute(INDEX_WALKS_ONLY)
        if bounded:
            window = max(limit * HEAD_WINDOW_PER_ROW, 1000)
            rows = list(
                await conn.fetch(CLAIM_WINDOW, now, owner, limit, default_concurrency, window)
            )
        else:
            rows = list(await conn.fetch(CLAIM, now, owner, limit, default_concurrency))
    if bounded and len(rows) < limit:
        start = "WH" + secrets.token_hex(16)
        async with db.transaction() as conn:
            await conn.execute(INDEX_WALKS_ONLY)
            rows += await conn.fetch(
                CLAIM_ENDPOINTS,
                now,
                owner,
                limit - len(rows),
                default_concurrency,
                ENDPOINTS_PER_VISIT,
                start,
            )
    claimed = []
    for row in rows:
        secrets_ = [row["secret"]]
        expires = row["previous_secret_expires_at"]
        if row["previous_secret"] and expires is not None and expires > now:
            secrets_.append(row["previous_secret"])
        claimed.append(
            Claimed(
                id=row["delivery_id"],
                webhook_id=row["webhook_id"],
                attempts=row["attempts"],
                is_test=row["is_test"],
                due_at=row["due_at"],
                payload=row["payload"].encode(),
                event_created_at=row["event_created_at"],
                url=row["url"],
                secrets=tuple(secrets_),
                max_concurrency=row["max_concurrency"],
                event_id=row["event_id"],
                trace_context=row["trace_context"],
                custom_headers=tuple(row["custom_headers"].items()),
                in_lane=row["in_lane"],
            )
        )
    return claimed


class Recorded(NamedTuple):
    """What a batch's record did, for the engine to report."""

    # Results written whose delivery is now failed, with why: their decision's, or
    # `expunged` / `disabled` for a retry given up because its event was expunged or its
    # webhook stopped while it was in flight.
    given_up: list[tuple[Result, GiveUpReason]]
    disabled: dict[str, DisabledReason]  # webhook id -> why, for those this batch disabled


async def record(
    db: Database, *, owner: str, results: Sequence[Result], now: datetime, disable_after: float
) -> Recorded:
    """Execute a batch of decisions in one transaction: the deliveries (one statement), the
    endpoints' health rollups (one statement), then each endpoint's failure clock and the
    disabling of endpoints that are gone or failing, as `outcomes` decides from what was
    written (a late result is neither written nor counted).

    Rows several engines share are locked in one order in every engine: the rollups (in key
    order), then webhooks (by id)."""
    if not results:
        return Recorded([], {})
    columns = _record_columns(results)
    async with db.transaction() as conn:
        await conn.execute(INDEX_WALKS_ONLY)
        rows = await conn.fetch(RECORD, *columns[:8], owner, *columns[8:])
        failed = {row["id"] for row in rows if row["status"] == DeliveryStatus.FAILED}
        pending = {row["id"] for row in rows if row["status"] == DeliveryStatus.PENDING}
        written = {row["id"]: row for row in rows}
        applied = [r for r in results if r.id in written]
        # Endpoint health: the attempts written and the deliveries they settled.
        settled = [
            Settled(r.webhook_id, row["created_at"], row["status"])
            for r in applied
            if (row := written[r.id])["status"] != DeliveryStatus.PENDING
        ]
        await stats.record_batch(conn, applied, settled, owner)
        await _update_failure_clocks(conn, applied)
        disabled = await _disable_endpoints(conn, applied, now, timedelta(seconds=disable_after))
        given_up = [(r, _why_given_up(r, written[r.id]["stop"])) for r in applied if r.id in failed]
        await _tell_workspaces(conn, applied, written, {r.id: why for r, why in given_up}, now)
        # Last (lane rows are locked after every other row a record takes; an operational
        # event's deliveries may join lanes too): the lanes whose head this batch settled
        # move on to their next delivery.
        settled_heads = [r.id for r in applied if r.in_lane and r.id not in pending]
        await _advance_lanes(conn, settled_heads, now)
    return Recorded(given_up, disabled)


def _why_given_up(result: Result, stop: str | None) -> GiveUpReason:
    """Why a written result's delivery is failed: as decided, or (a retry turned into a
    give-up by RECORD) because of what stopped it while the attempt was in flight."""
    if type(result.decision) is GivenUp:
        return result.decision.why
    return GiveUpReason.EXPUNGED if stop == GiveUpReason.EXPUNGED else GiveUpReason.DISABLED


_RecordColumns: TypeAlias = tuple[
    list[str],
    list[str],
    list[int | None],
    list[int],
    list[str | None],
    list[datetime | None],
    list[datetime | None],
    list[int],
    list[datetime],
    list[str],
    list[str | None],
]


def _record_columns(results: Sequence[Result]) -> _RecordColumns:
    """The RECORD statement's arrays ($1..$8, $10..$12): each decision as the columns that
    store it, and the attempt as the log keeps it."""
    ids: list[str] = []
    statuses: list[str] = []
    codes: list[int | None] = []
    durations: list[int] = []
    errors: list[str | None] = []
    delivered_at: list[datetime | None] = []
    next_attempt_at: list[datetime | None] = []
    attempts_before: list[int] = []
    started: list[datetime] = []
    kinds: list[str] = []
    bodies: list[str | None] = []
    for r in results:
        decision = r.decision
        ids.append(r.id)
        statuses.append(decision.status)
        codes.append(r.response_status)
        durations.append(r.response_ms)
        errors.append(r.last_error)
        delivered_at.append(decision.at if type(decision) is Delivered else None)
        next_attempt_at.append(decision.at if type(decision) is RetryAt else None)
        attempts_before.append(r.attempts_before)
        started.append(r.started_at)
        kinds.append(r.outcome)
        bodies.append(r.response_body)
    return (
        ids,
        statuses,
        codes,
        durations,
        errors,
        delivered_at,
        next_attempt_at,
        attempts_before,
        started,
        kinds,
        bodies,
    )


async def _tell_workspaces(
    conn: Connection,
    applied: Sequence[Result],
    written: dict[str, Record],
    given_up: dict[str, GiveUpReason],  # by delivery id
    now: datetime,
) -> None:
    """Publish the operational events the settled deliveries give rise to
    (`delivery.exhausted`, `delivery.recovered`), in the record transaction."""
    told = []
    for r in applied:
        row = written[r.id]
        if row["status"] == DeliveryStatus.PENDING:
            continue
        event = about_attempt(
            SettledAttempt(
                delivery_id=r.id,
                workspace_id=row["workspace_id"],
                webhook_id=r.webhook_id,
                event_id=row["event_id"],
                event_type=row["event_type"],
                status=DeliveryStatus(row["status"]),
                attempts=row["attempts"],
                last_error=row["last_error"],
                given_up=given_up.get(r.id),
                failed_before=row["failed_before"],
            )
        )
        if event is not None:
            told.append(event)
    await operational.publish(conn, told, now)


ADVANCE_LANES = "SELECT dispatcher_advance_lanes($1::text[], $2)"


async def _advance_lanes(conn: Connection, settled_heads: Sequence[str], now: datetime) -> None:
    """Give the lanes these settled heads led their next head, due now (schema.sql,
    dispatcher_advance_lanes): one statement, and none when the batch settled no lane's head."""
    if settled_heads:
        await conn.execute(ADVANCE_LANES, list(settled_heads), now)


async def _update_failure_clocks(conn: Connection, applied: Sequence[Result]) -> None:
    """Apply the failure clocks' changes (`outcomes.failure_clocks`) in one statement."""
    # By webhook id: two engines updating the same endpoints lock their rows in one order.
    changes = sorted(outcomes.failure_clocks(applied).items())
    if changes:
        await conn.execute(
            FAILING_CLOCK,
            [webhook_id for webhook_id, _ in changes],
            [c.reset for _, c in changes],
            [c.failing_from for _, c in changes],
        )


async def _disable_endpoints(
    conn: Connection, applied: Sequence[Result], now: datetime, disable_after: timedelta
) -> dict[str, DisabledReason]:
    """Disable the endpoints the batch's give-ups call for: gone ones at once, failing ones
    when their failure clock (as just updated, read under this transaction) says so."""
    to_disable = outcomes.endpoints_to_disable(applied)
    disabled: dict[str, DisabledReason] = {}
    if to_disable.gone:
        for webhook_id in await webhooks.disable(conn, to_disable.gone, DisabledReason.GONE, now):
            disabled[webhook_id] = DisabledReason.GONE
    if to_disable.maybe_failing:
        clocks = await conn.fetch(
            "SELECT id, failing_since FROM webhooks WHERE id = ANY($1::text[])",
            to_disable.maybe_failing,
        )
        failing = [
            row["id"]
            for row in clocks
            if outcomes.failing_too_long(row["failing_since"], now, disable_after)
        ]
        if failing:
            for webhook_id in await webhooks.disable(conn, failing, DisabledReason.FAILING, now):
                disabled[webhook_id] = DisabledReason.FAILING
    return disabled


async def release(db: Database, *, owner: str, delivery_ids: Sequence[str], now: datetime) -> int:
    """Hand back leases of deliveries this engine will not attempt (shutdown): due at once."""
    if not delivery_ids:
        return 0
    async with db.acquire() as conn:
        result: str = await conn.execute(
            "UPDATE delivery_queue SET lease_owner = NULL, due_at = $3 "
            "WHERE delivery_id = ANY($1::text[]) AND lease_owner = $2",
            list(delivery_ids),
            owner,
            now,
        )
    return int(result.split()[-1])


BEAT = """
INSERT INTO dispatcher_engines (owner) VALUES ($1)
ON CONFLICT (owner) DO UPDATE SET beat_at = now()
RETURNING (xmax = 0) AS registered
"""

TAKE_OVER = """
WITH dead AS (
    -- Engines silent for longer than the timeout (database time: one clock for every replica).
    DELETE FROM dispatcher_engines
    WHERE beat_at < now() - make_interval(secs => $1)
)
-- Their leases, and any lease whose owner is not a live engine, go back: due at once.
UPDATE delivery_queue q
SET lease_owner = NULL, due_at = $2
WHERE q.lease_owner IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM dispatcher_engines e
      WHERE e.owner = q.lease_owner AND e.beat_at >= now() - make_interval(secs => $1)
  )
"""


class Beat(NamedTuple):
    registered: bool  # this engine was not (or no longer) known as alive before this beat
    taken_over: int  # leases of dead engines handed back by this beat


async def beat(db: Database, *, owner: str, dead_after: float, now: datetime) -> Beat:
    """Say this engine is alive, and hand back the leases of engines that are not."""
    async with db.acquire() as conn:
        registered = bool(await conn.fetchval(BEAT, owner))
        result: str = await conn.execute(TAKE_OVER, dead_after, now)
    return Beat(registered, int(result.split()[-1]))


async def leave(db: Database, *, owner: str, now: datetime) -> int:
    """At the end of a clean stop: forget this engine and hand back whatever it still holds
    (results that could not be written): due at once, sent again with the same id."""
    async with db.transaction() as conn:
        await conn.execute("DELETE FROM dispatcher_engines WHERE owner = $1", owner)
        result: str = await conn.execute(
            "UPDATE delivery_queue SET lease_owner = NULL, due_at = $2 WHERE lease_owner = $1",
            owner,
            now,
        )
    return int(result.split()[-1])


DUE_COUNT_CAP = 1_000_000


async def due_summary(db: Database, now: datetime) -> tuple[int, float]:
    """(deliveries due now, age in seconds of the oldest due one), through the due index."""
    async with db.acquire() as conn:
        # Counted through the due index, capped so that a huge backlog stays cheap to gauge.
        row = await conn.fetchrow(
            "SELECT count(*) AS n, min(due_at) AS oldest FROM ("
            "  SELECT due_at FROM delivery_queue WHERE due_at <= $1"
            "  ORDER BY due_at LIMIT $2) due",
            now,
            DUE_COUNT_CAP,
        )
    assert row is not None
    oldest = row["oldest"]
    return int(row["n"]), 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)


async def any_due(db: Database, now: datetime) -> bool:
    """A cheap probe (one index entry): is anything due? An idle engine asks it often, so
    that a delivery made due by any door, even the SQL outbox, starts within milliseconds."""
    async with db.acquire() as conn:
        return bool(
            await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM delivery_queue WHERE due_at <= $1 "
                "AND lease_owner IS NULL)",
                now,
            )
        )

"""The engine's statements: claim due deliveries, record attempts in batches, release leases,
and the heartbeat that hands a dead engine's leases back.

The engine works on `delivery_queue` (schema.sql): one narrow row per pending delivery. A
claim sets `lease_owner` and moves `due_at` to 'infinity', so a claimed row leaves the due
walk. A lease holds while its engine beats (`dispatcher_engines`); when an engine stops
beating, any live engine hands its rows back, due at once. A result is recorded only by the
claim that holds the row (`lease_owner` and `attempts` match), so a late result from an engine
whose leases were handed back can never overwrite a newer one. The history (`deliveries`) is
written once per attempt, by the recorder, in the same statement.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dispatcher.store import webhooks
from dispatcher.store.database import Connection, Database

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
"""

# Two ways to find due rows; the rest of the claim (slots, leases, what it returns) is shared.
_WALK_HEAD = """
), due AS (
    -- Due rows in due order, walking delivery_queue_due lazily: a claim reads about as many
    -- entries as it takes (plus those of saturated endpoints it passes). Rows another engine
    -- is claiming right now are skipped, not waited for.
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test
    FROM delivery_queue q
    WHERE q.due_at <= $1
      AND q.webhook_id NOT IN (SELECT webhook_id FROM saturated)
    ORDER BY q.due_at
    LIMIT $3
    FOR UPDATE OF q SKIP LOCKED
"""

_WALK_WINDOW = """
), due AS (
    -- The same walk, within a window of the due index's first $5 entries: when much of the
    -- head of the backlog belongs to saturated endpoints, a claim still reads at most about
    -- twice the window, not the whole backlog.
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test
    FROM delivery_queue q
    WHERE q.due_at <= $1
      -- The window's end: the due time of its last entry (NULL: fewer due rows than that).
      AND q.due_at <= coalesce(
          (SELECT w.due_at FROM delivery_queue w WHERE w.due_at <= $1
           ORDER BY w.due_at OFFSET $5 - 1 LIMIT 1),
          $1)
      AND q.webhook_id NOT IN (SELECT webhook_id FROM saturated)
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
    LIMIT $5
), due AS (
    SELECT q.delivery_id, q.webhook_id, q.due_at, q.is_test
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

_CLAIM_REST = """), busy AS (
    -- Requests in flight now for the endpoints just walked.
    SELECT l.webhook_id, count(*) AS n
    FROM delivery_queue l
    WHERE l.lease_owner IS NOT NULL AND l.webhook_id IN (SELECT webhook_id FROM due)
    GROUP BY l.webhook_id
), ranked AS (
    -- Per endpoint, only as many rows as it has free slots. A row whose webhook was disabled
    -- or deleted gets `stopped` (why it is given up): such rows come up only when a lease
    -- taken before the disable was handed back unrecorded (its engine died), since disabling
    -- settles every row not in flight at once.
    SELECT due.delivery_id, due.due_at,
           row_number() OVER (PARTITION BY due.webhook_id
                              ORDER BY due.due_at, due.delivery_id) AS rank,
           coalesce(w.max_concurrency, $4) - coalesce(busy.n, 0) AS free,
           CASE WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND NOT due.is_test THEN 'webhook disabled'
           END AS stopped
    FROM due
    JOIN webhooks w ON w.id = due.webhook_id
    LEFT JOIN busy ON busy.webhook_id = due.webhook_id
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
)
UPDATE delivery_queue q
SET lease_owner = $2, due_at = 'infinity'
FROM ranked, webhooks w, events e
WHERE q.delivery_id = ranked.delivery_id
  AND ranked.stopped IS NULL
  AND ranked.rank <= ranked.free
  AND w.id = q.webhook_id
  AND e.id = q.event_id
  AND e.created_at = q.created_at
RETURNING q.delivery_id, q.webhook_id, q.attempts, q.is_test, ranked.due_at,
          e.payload, e.created_at AS event_created_at, w.url, w.secret, w.previous_secret,
          w.previous_secret_expires_at, coalesce(w.max_concurrency, $4) AS max_concurrency
"""


CLAIM = _SATURATED.rstrip() + _WALK_HEAD + _CLAIM_REST
CLAIM_WINDOW = _SATURATED.rstrip() + _WALK_WINDOW + _CLAIM_REST
CLAIM_ENDPOINTS = _SATURATED.rstrip() + _WALK_ENDPOINTS + _CLAIM_REST

RECORD = """
WITH r AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::timestamptz[],
                $7::timestamptz[], $8::int[])
         AS r(id, status, response_status, response_ms, last_error, delivered_at,
              next_attempt_at, attempts_before)
), held AS (
    -- Only results of attempts this engine still holds: a late one (its lease was handed
    -- back, the row claimed again or settled) is dropped.
    SELECT q.delivery_id, q.created_at, r.*,
           CASE WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND NOT q.is_test THEN 'webhook disabled'
           END AS stop
    FROM r
    JOIN delivery_queue q ON q.delivery_id = r.id
    JOIN webhooks w ON w.id = q.webhook_id
    -- (IS NOT DISTINCT FROM: not an index condition, so the rows are found from the results
    -- by primary key, never by walking every lease, whatever the statistics say.)
    WHERE q.lease_owner IS NOT DISTINCT FROM $9 AND q.attempts = r.attempts_before
    FOR UPDATE OF q
), final AS (
    -- An attempt that was made is always counted and its outcome written. A retry it would
    -- have scheduled is given up instead when the webhook was disabled (test deliveries
    -- excepted, as in the claim) or deleted while the attempt was in flight.
    SELECT delivery_id, created_at, response_status, response_ms, delivered_at,
           attempts_before + 1 AS attempts,
           CASE WHEN status = 'pending' AND stop IS NOT NULL THEN 'failed'
                ELSE status END AS status,
           CASE WHEN status = 'pending' AND stop IS NOT NULL
                THEN last_error || ' (' || stop || ')' ELSE last_error END AS last_error,
           CASE WHEN status = 'pending' AND stop IS NOT NULL THEN NULL
                ELSE next_attempt_at END AS next_attempt_at
    FROM held
), settled AS (
    DELETE FROM delivery_queue q
    USING final f
    WHERE q.delivery_id = f.delivery_id AND f.status <> 'pending'
), again AS (
    UPDATE delivery_queue q
    SET due_at = f.next_attempt_at, attempts = f.attempts, lease_owner = NULL
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
RETURNING d.id, d.status
"""

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


@dataclass(frozen=True)
class Claimed:
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


@dataclass(frozen=True)
class Result:
    """The outcome of one attempt, as it will be recorded."""

    id: str
    webhook_id: str
    attempts_before: int
    status: str  # pending | delivered | failed
    response_status: int | None
    response_ms: int
    last_error: str | None
    delivered_at: datetime | None
    next_attempt_at: datetime | None
    finished_at: datetime
    succeeded: bool
    gone: bool  # the endpoint answered 410: disable it
    gave_up: bool  # attempts exhausted: maybe disable it (failing)


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
            )
        )
    return claimed


@dataclass(frozen=True)
class Recorded:
    applied: dict[str, str]  # delivery id -> status now recorded, for results written
    disabled: dict[str, str]  # webhook id -> reason, for webhooks disabled by this batch


async def record(
    db: Database, *, owner: str, results: Sequence[Result], now: datetime, disable_after: float
) -> Recorded:
    """Write a batch of results in one transaction: the deliveries (one statement), each
    endpoint's failure clock, and the disabling of endpoints that are gone or failing."""
    if not results:
        return Recorded({}, {})
    async with db.transaction() as conn:
        await conn.execute(INDEX_WALKS_ONLY)
        rows = await conn.fetch(
            RECORD,
            [r.id for r in results],
            [r.status for r in results],
            [r.response_status for r in results],
            [r.response_ms for r in results],
            [r.last_error for r in results],
            [r.delivered_at for r in results],
            [r.next_attempt_at for r in results],
            [r.attempts_before for r in results],
            owner,
        )
        statuses: dict[str, str] = {row["id"]: row["status"] for row in rows}
        applied = [r for r in results if r.id in statuses]
        await _update_failure_clocks(conn, applied)
        disabled: dict[str, str] = {}
        gone = sorted({r.webhook_id for r in applied if r.gone})
        for webhook_id in await webhooks.disable(conn, gone, "gone", now):
            disabled[webhook_id] = "gone"
        gave_up = sorted({r.webhook_id for r in applied if r.gave_up} - set(gone))
        if gave_up:
            failing = await conn.fetch(
                "SELECT id FROM webhooks WHERE id = ANY($1::text[]) AND failing_since <= $2",
                gave_up,
                now - timedelta(seconds=disable_after),
            )
            ids = [row["id"] for row in failing]
            for webhook_id in await webhooks.disable(conn, ids, "failing", now):
                disabled[webhook_id] = "failing"
    return Recorded(statuses, disabled)


async def _update_failure_clocks(conn: Connection, applied: Sequence[Result]) -> None:
    """Per endpoint: any success resets its clock; failures after the last success start it."""
    by_webhook: dict[str, tuple[bool, datetime | None]] = {}
    for result in sorted(applied, key=lambda r: r.finished_at):
        reset, fail_start = by_webhook.get(result.webhook_id, (False, None))
        if result.succeeded:
            by_webhook[result.webhook_id] = (True, None)
        elif fail_start is None:
            by_webhook[result.webhook_id] = (reset, result.finished_at)
    if by_webhook:
        await conn.execute(
            FAILING_CLOCK,
            list(by_webhook),
            [v[0] for v in by_webhook.values()],
            [v[1] for v in by_webhook.values()],
        )


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


@dataclass(frozen=True)
class Beat:
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

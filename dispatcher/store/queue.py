"""The engine's statements: claim due deliveries, record attempts in batches, release leases.

The lease is `next_attempt_at` itself: a claim moves it to the lease's expiry, so a claimed row
leaves the due set, and returns to it by itself if its process dies before recording. A
result is recorded only by the claim that holds the row (`lease_owner` and `attempts` match),
so a late result from a process whose lease ran out can never overwrite a newer one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dispatcher.store import webhooks
from dispatcher.store.database import Connection, Database

CLAIM = """
WITH due AS (
    -- Due rows in due order, through the partial index deliveries_due; rows another engine
    -- is claiming right now are skipped, not waited for. Endpoints this engine already
    -- saturates are left out so their backlog cannot crowd out healthy endpoints.
    SELECT d.id, d.webhook_id, d.event_type, d.next_attempt_at
    FROM deliveries d
    WHERE d.status = 'pending'
      AND d.next_attempt_at <= $1
      AND d.webhook_id <> ALL ($4::text[])
    ORDER BY d.next_attempt_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), busy AS (
    -- Requests in flight now per endpoint, across every engine (unexpired leases).
    SELECT l.webhook_id, count(*) AS n
    FROM deliveries l
    WHERE l.status = 'pending' AND l.lease_owner IS NOT NULL AND l.next_attempt_at > $1
      AND l.webhook_id IN (SELECT webhook_id FROM due)
    GROUP BY l.webhook_id
), ranked AS (
    -- Per endpoint, only as many rows as it has free slots. Rows whose webhook was disabled
    -- or deleted get `stopped` (why they are given up): they come up here only when a lease
    -- taken before the disable ran out unrecorded (its engine died), since disabling settles
    -- every row not in flight at once.
    SELECT due.id, due.next_attempt_at AS due_at,
           row_number() OVER (PARTITION BY due.webhook_id
                              ORDER BY due.next_attempt_at, due.id) AS rank,
           coalesce(w.max_concurrency, $5) - coalesce(busy.n, 0) AS free,
           CASE WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                WHEN w.disabled_at IS NOT NULL AND due.event_type <> 'webhook.test'
                    THEN 'webhook disabled'
           END AS stopped
    FROM due
    JOIN webhooks w ON w.id = due.webhook_id
    LEFT JOIN busy ON busy.webhook_id = due.webhook_id
)
UPDATE deliveries d
SET lease_owner = CASE WHEN ranked.stopped IS NULL THEN $2::text END,
    next_attempt_at = CASE WHEN ranked.stopped IS NULL THEN $6::timestamptz END,
    status = CASE WHEN ranked.stopped IS NULL THEN 'pending' ELSE 'failed' END,
    last_error = coalesce(ranked.stopped, d.last_error)
FROM ranked, webhooks w, events e
WHERE d.id = ranked.id
  AND (ranked.stopped IS NOT NULL OR ranked.rank <= ranked.free)
  AND w.id = d.webhook_id
  AND e.id = d.event_id
  AND e.created_at = d.created_at
RETURNING d.id, d.webhook_id, d.workspace_id, d.attempts, d.event_type, ranked.due_at,
          e.payload, e.created_at AS event_created_at, w.url, w.secret, w.previous_secret,
          w.previous_secret_expires_at, coalesce(w.max_concurrency, $5) AS max_concurrency,
          ranked.stopped IS NULL AS leased
"""

RECORD = """
-- An attempt that was made is always counted and its outcome written. A retry it would have
-- scheduled is given up instead when the webhook was disabled (test deliveries excepted, as
-- in the claim) or deleted while the attempt was in flight.
UPDATE deliveries d
SET attempts = d.attempts + 1,
    status = CASE WHEN r.status = 'pending' AND stop.reason IS NOT NULL THEN 'failed'
                  ELSE r.status END,
    response_status = r.response_status,
    response_ms = r.response_ms,
    last_error = CASE WHEN r.status = 'pending' AND stop.reason IS NOT NULL
                      THEN r.last_error || ' (' || stop.reason || ')'
                      ELSE r.last_error END,
    delivered_at = r.delivered_at,
    next_attempt_at = CASE WHEN r.status = 'pending' AND stop.reason IS NOT NULL THEN NULL
                           ELSE r.next_attempt_at END,
    lease_owner = NULL
FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::timestamptz[],
            $7::timestamptz[], $8::int[], $10::bool[])
     AS r(id, status, response_status, response_ms, last_error, delivered_at,
          next_attempt_at, attempts_before, is_test),
     webhooks w,
     LATERAL (SELECT CASE WHEN w.deleted_at IS NOT NULL THEN 'webhook deleted'
                          WHEN w.disabled_at IS NOT NULL AND NOT r.is_test
                              THEN 'webhook disabled'
                     END AS reason) stop
WHERE d.id = r.id
  AND w.id = d.webhook_id
  AND d.lease_owner = $9
  AND d.status = 'pending'
  AND d.attempts = r.attempts_before
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
    workspace_id: str
    attempts: int
    event_type: str
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
    is_test: bool  # a `webhook.test` delivery (still tried while its webhook is disabled)
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


async def claim(
    db: Database,
    *,
    owner: str,
    now: datetime,
    limit: int,
    skip_webhooks: Sequence[str],
    default_concurrency: int,
    lease: timedelta,
) -> list[Claimed]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            CLAIM, now, owner, limit, list(skip_webhooks), default_concurrency, now + lease
        )
    claimed = []
    for row in rows:
        if not row["leased"]:
            continue  # given up in the claim: its webhook was disabled or deleted
        secrets = [row["secret"]]
        expires = row["previous_secret_expires_at"]
        if row["previous_secret"] and expires is not None and expires > now:
            secrets.append(row["previous_secret"])
        claimed.append(
            Claimed(
                id=row["id"],
                webhook_id=row["webhook_id"],
                workspace_id=row["workspace_id"],
                attempts=row["attempts"],
                event_type=row["event_type"],
                due_at=row["due_at"],
                payload=row["payload"].encode(),
                event_created_at=row["event_created_at"],
                url=row["url"],
                secrets=tuple(secrets),
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
            [r.is_test for r in results],
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
    """Hand back leases of deliveries this engine will not attempt (shutdown)."""
    if not delivery_ids:
        return 0
    async with db.acquire() as conn:
        result: str = await conn.execute(
            "UPDATE deliveries SET lease_owner = NULL, next_attempt_at = $3 "
            "WHERE id = ANY($1::text[]) AND lease_owner = $2 AND status = 'pending'",
            list(delivery_ids),
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
            "SELECT count(*) AS n, min(next_attempt_at) AS oldest FROM ("
            "  SELECT next_attempt_at FROM deliveries"
            "  WHERE status = 'pending' AND next_attempt_at <= $1"
            "  ORDER BY next_attempt_at LIMIT $2) due",
            now,
            DUE_COUNT_CAP,
        )
    assert row is not None
    oldest = row["oldest"]
    return int(row["n"]), 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)

"""Deliveries as the API sees them: read, list, test, retry, recover.

(The engine's claim and record statements live in store/queue.py.)
"""

from __future__ import annotations

from datetime import datetime

from dispatcher import metrics
from dispatcher.domain import ids
from dispatcher.domain.events import TEST_EVENT, envelope
from dispatcher.errors import Conflict, NotFound
from dispatcher.store import webhooks
from dispatcher.store.database import Connection, Database, Record, fetch_one
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.pages import Filters, Page, Position, fetch_page

SELECT = """
    SELECT d.id, d.webhook_id, d.attempts, d.created_at, d.delivered_at, d.event_type,
           d.last_error, d.next_attempt_at, d.response_ms, d.response_status, d.status,
           e.payload
    FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
"""


async def _live_webhook(conn: Connection, workspace_id: str, webhook_id: str) -> Record:
    hook = await webhooks.get(conn, workspace_id, webhook_id)
    if hook is None:
        raise NotFound("webhook not found")
    return hook


async def get(db: Database, workspace_id: str, webhook_id: str, delivery_id: str) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            f"{SELECT} WHERE d.workspace_id = $1 AND d.webhook_id = $2 AND d.id = $3",
            workspace_id,
            webhook_id,
            delivery_id,
        )
    return row


async def list_page(
    db: Database,
    workspace_id: str,
    webhook_id: str,
    *,
    status: str | None,
    event: str | None,
    limit: int,
    after: Position | None,
) -> Page:
    filters = (
        Filters().add("d.workspace_id = {}", workspace_id).add("d.webhook_id = {}", webhook_id)
    )
    if status is not None:
        filters.add("d.status = {}", status)
    if event is not None:
        filters.add("d.event_type = {}", event)
    async with db.acquire() as conn:
        return await fetch_page(conn, SELECT, filters, limit, after, alias="d")


# A new pending delivery's row in the engine's queue (schema.sql: delivery_queue), from the
# history row just written or made pending again.
ENQUEUE = """
INSERT INTO delivery_queue (delivery_id, created_at, webhook_id, event_id, is_test, due_at,
                            attempts)
SELECT id, created_at, webhook_id, event_id, event_type = 'webhook.test', next_attempt_at,
       attempts
FROM deliveries
WHERE id = ANY($1::text[]) AND status = 'pending'
ON CONFLICT (delivery_id) DO NOTHING
"""


async def create_test(db: Database, workspace_id: str, webhook_id: str, now: datetime) -> Record:
    """A `webhook.test` event and its one delivery, whatever the webhook hears (even disabled)."""
    async with db.transaction() as conn:
        await _live_webhook(conn, workspace_id, webhook_id)
        event_id = ids.new_id(ids.EVENT)
        payload = envelope(event_id, TEST_EVENT, now, {"id": webhook_id})
        await conn.execute(
            "INSERT INTO events (id, workspace_id, type, number_id, source, payload, created_at) "
            "VALUES ($1, $2, $3, NULL, 'test', $4, $5)",
            event_id,
            workspace_id,
            TEST_EVENT,
            payload,
            now,
        )
        metrics.EVENTS_PUBLISHED.labels("test", TEST_EVENT).inc()
        metrics.FANNED_OUT.inc()
        delivery_id = ids.new_id(ids.DELIVERY)
        await conn.execute(
            "INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type, "
            "created_at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
            delivery_id,
            workspace_id,
            webhook_id,
            event_id,
            TEST_EVENT,
            now,
        )
        await conn.execute(ENQUEUE, [delivery_id])
        row = await fetch_one(
            conn, f"{SELECT} WHERE d.id = $1 AND d.created_at = $2", delivery_id, now
        )
    db.wake(DELIVERIES_CHANNEL)
    return row


IN_FLIGHT = (
    "the delivery is being attempted right now; a second request in parallel would reach the "
    "receiver twice. Retry it once this attempt is recorded"
)


async def retry(
    db: Database, workspace_id: str, webhook_id: str, delivery_id: str, now: datetime
) -> Record:
    """Make a delivery due now, whatever its status; same id, so the same `webhook-id`."""
    async with db.transaction() as conn:
        hook = await _live_webhook(conn, workspace_id, webhook_id)
        found = await conn.fetchval(
            "SELECT id FROM deliveries WHERE workspace_id = $1 AND webhook_id = $2 AND id = $3 "
            "FOR UPDATE",
            workspace_id,
            webhook_id,
            delivery_id,
        )
        if found is None:
            raise NotFound("delivery not found")
        if hook["disabled_at"] is not None:
            raise Conflict("the webhook is disabled; enable it (PATCH enabled=true) to retry")
        # The history row's lock (above) orders retries of one delivery; the queue row's lock
        # orders this retry against claims (which skip locked rows).
        queued = await conn.fetchrow(
            "SELECT lease_owner FROM delivery_queue WHERE delivery_id = $1 FOR UPDATE",
            delivery_id,
        )
        if queued is not None and queued["lease_owner"] is not None:
            raise Conflict(IN_FLIGHT)
        await conn.execute(
            "UPDATE deliveries SET status = 'pending', next_attempt_at = $2, delivered_at = NULL "
            "WHERE id = $1",
            delivery_id,
            now,
        )
        if queued is None:
            await conn.execute(ENQUEUE, [delivery_id])
        else:
            await conn.execute(
                "UPDATE delivery_queue SET due_at = $2 WHERE delivery_id = $1", delivery_id, now
            )
        row = await fetch_one(conn, f"{SELECT} WHERE d.id = $1", delivery_id)
    db.wake(DELIVERIES_CHANNEL)
    return row


async def recover(
    db: Database,
    workspace_id: str,
    webhook_id: str,
    since: datetime,
    until: datetime,
    now: datetime,
) -> int:
    """Re-queue the window's failed deliveries and create those the webhook missed (while
    disabled, or before it heard the type); returns how many were queued.

    Only events created at or after the subscription itself count: `since` earlier than its
    `createdAt` is moved up to it. Deliveries pending (in flight or waiting) or delivered are
    never touched, so recover cannot make a second, parallel send.
    """
    async with db.transaction() as conn:
        hook = await _live_webhook(conn, workspace_id, webhook_id)
        if hook["disabled_at"] is not None:
            raise Conflict("the webhook is disabled; enable it (PATCH enabled=true) to recover")
        since = max(since, hook["created_at"])
        if until <= since:
            return 0
        requeued = await conn.fetch(
            "UPDATE deliveries SET status = 'pending', next_attempt_at = $4 "
            "WHERE webhook_id = $1 AND status = 'failed' AND created_at >= $2 AND created_at < $3 "
            "RETURNING id",
            webhook_id,
            since,
            until,
            now,
        )
        created = await conn.fetch(
            """
            INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type,
                created_at, next_attempt_at)
            SELECT dispatcher_new_id('WD'), e.workspace_id, w.id, e.id, e.type, e.created_at, $5
            FROM webhooks w
            JOIN events e ON e.workspace_id = w.workspace_id
            WHERE w.id = $1 AND w.workspace_id = $2
              AND e.created_at >= $3 AND e.created_at < $4
              AND e.type = ANY (w.events)
              AND (w.number_ids IS NULL OR e.number_id = ANY (w.number_ids))
            ON CONFLICT (webhook_id, event_id, created_at) DO NOTHING
            RETURNING id
            """,
            webhook_id,
            workspace_id,
            since,
            until,
            now,
        )
        queued = [r["id"] for r in (*requeued, *created)]
        if queued:
            await conn.execute(ENQUEUE, queued)
    if queued:
        db.wake(DELIVERIES_CHANNEL)
    return len(queued)

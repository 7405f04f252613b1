"""Deliveries as the API sees them: read, list, test, retry, recover.

New deliveries, with their rows in the engine's queue, are made by functions.sql's
`dispatcher_add_deliveries` alone (a test's through `events.append_event`, a recover's missed ones
through `deliver_missed`). The statements are in queries/deliveries.sql; the engine's claim and
record statements live in queries/queue.sql (store/queue.py).
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from dispatcher.domain.enums import AttemptTrigger
from dispatcher.domain.events import TEST_EVENT, webhook_test_data
from dispatcher.errors import Conflict, NotFound
from dispatcher.store import events, expunge, webhooks
from dispatcher.store.database import Connection, Database, fetch_one
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.pages import Page, Position, fetch_page, paging, window
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import DeliveryRow, WebhookRow, as_row, fetch_row


class SQL(Queries, file="deliveries.sql"):
    deliveries_page: Statement
    delivery: Statement
    event_delivery: Statement
    lock_delivery: Statement
    lock_queued: Statement
    lock_queued_now: Statement
    make_pending: Statement
    make_due: Statement
    requeue_failed: Statement
    enqueue: Statement
    deliver_missed: Statement
    event_deliveries_page: Statement
    event_delivery_count: Statement


async def _live_webhook(conn: Connection, workspace_id: str, webhook_id: str) -> WebhookRow:
    hook = await webhooks.get(conn, workspace_id, webhook_id)
    if hook is None:
        raise NotFound("webhook not found")
    return hook


async def get(
    db: Database, workspace_id: str, webhook_id: str, delivery_id: str
) -> DeliveryRow | None:
    return await fetch_row(
        db,
        SQL.delivery(workspace_id=workspace_id, webhook_id=webhook_id, delivery_id=delivery_id),
        DeliveryRow,
    )


async def list_page(
    db: Database,
    workspace_id: str,
    webhook_id: str,
    *,
    status: str | None,
    event: str | None,
    limit: int,
    after: Position | None,
    event_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Page[DeliveryRow]:
    """A webhook's deliveries, newest first; `since` inclusive, `until` exclusive, on when
    they were created (their event's time)."""
    page = SQL.deliveries_page(
        workspace_id=workspace_id,
        webhook_id=webhook_id,
        status=status,
        event_type=event,
        event_id=event_id,
        **window(since, until),
        **paging(after, limit),
    )
    return await fetch_page(db, page, DeliveryRow, limit)


async def create_test(
    db: Database, workspace_id: str, webhook_id: str, now: datetime
) -> DeliveryRow:
    """A `webhook.test` event and its one delivery, whatever the webhook hears (even disabled)."""
    async with db.transaction() as conn:
        await _live_webhook(conn, workspace_id, webhook_id)
        # Published like any event, to this one webhook instead of the subscribers.
        event_id, _, _ = await events.append_event(
            conn,
            workspace_id=workspace_id,
            event_type=TEST_EVENT,
            number_id=None,
            data=webhook_test_data(webhook_id),
            source="test",
            created_at=now,
            webhook_ids=[webhook_id],
        )
        row = await fetch_one(
            conn, SQL.event_delivery(webhook_id=webhook_id, event_id=event_id, now=now)
        )
    db.wake(DELIVERIES_CHANNEL)
    return as_row(DeliveryRow, row)


# Seconds each statement of a recover may run (docs/api.md, "Bounds"): a 14-day window of a
# busy workspace is read whole, event by event.
RECOVER_TIMEOUT = 10.0
EXPUNGED = "the delivery's event was expunged: its content is gone, so it cannot be sent again"
BUSY = (
    "the delivery is being changed by another request (a retry, a disable, a claim); "
    "retry it in a moment"
)
IN_FLIGHT = (
    "the delivery is being attempted right now; a second request in parallel would reach the "
    "receiver twice. Retry it once this attempt is recorded"
)


async def retry(
    db: Database, workspace_id: str, webhook_id: str, delivery_id: str, now: datetime
) -> DeliveryRow:
    """Make a delivery due now, whatever its status; same id, so the same `webhook-id`. A
    delivery whose event was expunged has nothing left to send: a conflict."""
    async with db.transaction() as conn:
        await expunge.hold_off_expunges(conn, workspace_id)
        hook = await _live_webhook(conn, workspace_id, webhook_id)
        if (
            await conn.fetchrow(
                *SQL.delivery(
                    workspace_id=workspace_id, webhook_id=webhook_id, delivery_id=delivery_id
                )
            )
            is None
        ):
            raise NotFound("delivery not found")
        # The queue row's lock orders this retry against claims (which skip locked rows) and
        # the record; the history row's, retries of a delivery no longer queued. In that
        # order, as the claim and the record take them (docs/delivery.md, "Lock order"): a
        # retry holding the history row while it waited for a record, which holds the queue
        # row and then writes the history row, would deadlock with it. (Two retries of a
        # settled delivery: the second finds the row the first queued; `enqueue` leaves it.)
        queued = await conn.fetchrow(*SQL.lock_queued(delivery_id=delivery_id))
        found = await conn.fetchrow(
            *SQL.lock_delivery(
                workspace_id=workspace_id, webhook_id=webhook_id, delivery_id=delivery_id
            )
        )
        if found is None:
            raise NotFound("delivery not found")
        if queued is None:
            # Not queued when we looked: another retry or a recover may have queued it while
            # we waited for the history row. Look again without waiting: a queue row that
            # another transaction holds now (a disable giving it up, a claim) is a conflict to
            # retry, never a wait that could close a circle with that transaction.
            try:
                queued = await conn.fetchrow(*SQL.lock_queued_now(delivery_id=delivery_id))
            except asyncpg.LockNotAvailableError as exc:
                raise Conflict(BUSY) from exc
        if found["expunged"]:
            raise Conflict(EXPUNGED)
        if hook.disabled_at is not None:
            raise Conflict("the webhook is disabled; enable it, then retry")
        if queued is not None and queued["lease_owner"] is not None:
            raise Conflict(IN_FLIGHT)
        await conn.execute(*SQL.make_pending(delivery_id=delivery_id, due_at=now))
        if queued is None:
            await conn.execute(
                *SQL.enqueue(delivery_ids=[delivery_id], trigger=AttemptTrigger.MANUAL_RETRY)
            )
        else:
            await conn.execute(
                *SQL.make_due(
                    delivery_id=delivery_id, due_at=now, trigger=AttemptTrigger.MANUAL_RETRY
                )
            )
        row = await fetch_one(
            conn,
            SQL.delivery(workspace_id=workspace_id, webhook_id=webhook_id, delivery_id=delivery_id),
        )
    db.wake(DELIVERIES_CHANNEL)
    return as_row(DeliveryRow, row)


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
    creation is moved up to it. Deliveries pending (in flight or waiting) or delivered are
    never touched, so recover cannot make a second, parallel send. Expunged events are
    skipped: they have nothing left to send (a range is recovered as far as it can be; a
    retry of one expunged delivery, by contrast, is refused).

    Its work grows with the window (every event of the workspace in it is read, and its data
    compared with the payload filter), so each of its statements runs under a statement
    timeout (RECOVER_TIMEOUT): past it the whole recover rolls back, changing nothing, and
    the caller is told to narrow the window (Overloaded; docs/api.md, "Bounds").
    """
    async with db.transaction() as conn:
        await conn.execute(f"SET LOCAL statement_timeout = {round(RECOVER_TIMEOUT * 1000)}")
        await expunge.hold_off_expunges(conn, workspace_id)
        hook = await _live_webhook(conn, workspace_id, webhook_id)
        if hook.disabled_at is not None:
            raise Conflict("the webhook is disabled; enable it, then recover")
        since = max(since, hook.created_at)
        if until <= since:
            return 0
        requeued = [
            r["id"]
            for r in await conn.fetch(
                *SQL.requeue_failed(webhook_id=webhook_id, since=since, until=until, now=now)
            )
        ]
        if requeued:
            await conn.execute(*SQL.enqueue(delivery_ids=requeued, trigger=AttemptTrigger.RECOVER))
        created: int = await conn.fetchval(
            *SQL.deliver_missed(
                webhook_id=webhook_id,
                workspace_id=workspace_id,
                since=since,
                until=until,
                now=now,
                trigger=AttemptTrigger.RECOVER,
            )
        )
    queued = len(requeued) + created
    if queued:
        db.wake(DELIVERIES_CHANNEL)
    return queued


async def list_for_event(
    db: Database,
    workspace_id: str,
    event_id: str,
    event_created_at: datetime,
    *,
    limit: int,
    after: Position | None,
) -> Page[DeliveryRow]:
    """A page of an event's deliveries, newest first."""
    page = SQL.event_deliveries_page(
        event_id=event_id,
        created_at=event_created_at,
        workspace_id=workspace_id,
        **paging(after, limit),
    )
    return await fetch_page(db, page, DeliveryRow, limit)


async def count_for_event(
    db: Database, workspace_id: str, event_id: str, event_created_at: datetime
) -> int:
    """How many deliveries an event has, as `list_for_event` finds them."""
    async with db.acquire() as conn:
        count: int = await conn.fetchval(
            *SQL.event_delivery_count(
                event_id=event_id, event_created_at=event_created_at, workspace_id=workspace_id
            )
        )
    return count

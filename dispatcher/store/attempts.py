"""The attempt log (schema.sql: delivery_attempts), as the API reads it.

Attempts are written by the engine's record statement (store/queue.py: RECORD), one per
attempt, in the same statement as their delivery; this module only reads them. They carry no
workspace: the caller has checked that the webhook (and the delivery) are the workspace's.
"""

from __future__ import annotations

from datetime import datetime

from dispatcher.store.database import Database
from dispatcher.store.pages import Filters, Page, Position, fetch_page
from dispatcher.store.rows import AttemptRow

SELECT = (
    "SELECT id, delivery_id, webhook_id, attempt_number, created_at, response_status, "
    "response_ms, outcome, error, response_body, trigger FROM delivery_attempts"
)


async def list_for_delivery(
    db: Database,
    webhook_id: str,
    delivery_id: str,
    delivery_created_at: datetime,
    *,
    limit: int,
    after: Position | None,
) -> Page[AttemptRow]:
    """One delivery's attempts, newest first (its partition only: `delivery_created_at`)."""
    filters = (
        Filters()
        .add("delivery_created_at = {}", delivery_created_at)
        .add("delivery_id = {}", delivery_id)
        .add("webhook_id = {}", webhook_id)
    )
    async with db.acquire() as conn:
        return await fetch_page(conn, SELECT, AttemptRow, filters, limit, after)


async def list_for_webhook(
    db: Database,
    webhook_id: str,
    *,
    outcome: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: Position | None,
) -> Page[AttemptRow]:
    """Every attempt to an endpoint, newest first; `since` inclusive, `until` exclusive, on
    when the attempt started."""
    filters = Filters().add("webhook_id = {}", webhook_id)
    if outcome is not None:
        filters.add("outcome = {}", outcome)
    if since is not None:
        filters.add("created_at >= {}", since)
    if until is not None:
        filters.add("created_at < {}", until)
    async with db.acquire() as conn:
        return await fetch_page(conn, SELECT, AttemptRow, filters, limit, after)

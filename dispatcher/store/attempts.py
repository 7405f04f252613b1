"""The attempt log (schema.sql: delivery_attempts), as the API reads it.

Attempts are written by the engine's record statement (queries/queue.sql: `record`), one per
attempt, in the same statement as their delivery; this module only reads them (its statement
is in queries/attempts.sql). They carry no
workspace: the caller has checked that the webhook (and the delivery) are the workspace's.
"""

from __future__ import annotations

from datetime import datetime

from dispatcher.store.database import Database
from dispatcher.store.pages import Page, Position, fetch_page, paging, window
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import AttemptRow


class SQL(Queries, file="attempts.sql"):
    delivery_attempts_page: Statement
    webhook_attempts_page: Statement


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
    page = SQL.delivery_attempts_page(
        delivery_created_at=delivery_created_at,
        delivery_id=delivery_id,
        webhook_id=webhook_id,
        **paging(after, limit),
    )
    return await fetch_page(db, page, AttemptRow, limit)


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
    page = SQL.webhook_attempts_page(
        webhook_id=webhook_id, outcome=outcome, **window(since, until), **paging(after, limit)
    )
    return await fetch_page(db, page, AttemptRow, limit)

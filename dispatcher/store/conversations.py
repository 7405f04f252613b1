"""Conversation threads: one per (workspace number, contact)."""

from __future__ import annotations

from datetime import datetime

from dispatcher.domain import ids
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.pages import Filters, Page, Position, fetch_page

COLUMNS = "id, workspace_id, number_id, contact, status, created_at, last_item_at, last_item_kind"


async def touch(
    conn: Connection,
    *,
    workspace_id: str,
    number_id: str,
    contact: str,
    kind: str,
    incoming: bool,
    at: datetime,
) -> str:
    """Create the thread if absent and record its latest item; returns its id.

    New threads start `open`; an incoming item reopens a `done` thread (an inbox), an
    outgoing one leaves the folder alone.
    """
    conversation_id: str = await conn.fetchval(
        """
        INSERT INTO conversations
            (id, workspace_id, number_id, contact, status, created_at, last_item_at,
             last_item_kind)
        VALUES ($1, $2, $3, $4, 'open', $5, $5, $6)
        ON CONFLICT (number_id, contact) DO UPDATE SET
            last_item_at = greatest(conversations.last_item_at, EXCLUDED.last_item_at),
            last_item_kind = EXCLUDED.last_item_kind,
            status = CASE WHEN $7 THEN 'open' ELSE conversations.status END
        RETURNING id
        """,
        ids.new_id(ids.CONVERSATION),
        workspace_id,
        number_id,
        contact,
        at,
        kind,
        incoming,
    )
    return conversation_id


async def get(db: Database, workspace_id: str, conversation_id: str) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            f"SELECT {COLUMNS} FROM conversations WHERE workspace_id = $1 AND id = $2",
            workspace_id,
            conversation_id,
        )
    return row


async def set_status(
    db: Database, workspace_id: str, conversation_id: str, status: str
) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            f"UPDATE conversations SET status = $3 WHERE workspace_id = $1 AND id = $2 "
            f"RETURNING {COLUMNS}",
            workspace_id,
            conversation_id,
            status,
        )
    return row


async def list_page(
    db: Database,
    workspace_id: str,
    *,
    status: str | None,
    number_id: str | None,
    limit: int,
    after: Position | None,
) -> Page:
    filters = Filters().add("workspace_id = {}", workspace_id)
    if status is not None:
        filters.add("status = {}", status)
    if number_id is not None:
        filters.add("number_id = {}", number_id)
    async with db.acquire() as conn:
        return await fetch_page(conn, f"SELECT {COLUMNS} FROM conversations", filters, limit, after)

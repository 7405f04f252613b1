"""Messages and call records, each written with its conversation update and its event in one
transaction, so an event exists exactly when the change it describes does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dispatcher.domain import ids, resources
from dispatcher.store import conversations
from dispatcher.store.database import Connection, Database, Record, fetch_one
from dispatcher.store.events import append_event
from dispatcher.store.notifications import CARRIER_CHANNEL, DELIVERIES_CHANNEL
from dispatcher.store.pages import Filters, Page, Position, fetch_page

COLUMNS = (
    "id, workspace_id, number_id, conversation_id, direction, from_number, to_number, text, "
    "media, status, created_at"
)
CALL_COLUMNS = (
    "id, workspace_id, number_id, conversation_id, direction, from_number, to_number, status, "
    "duration_seconds, created_at"
)


async def create_outgoing(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    text: str,
    now: datetime,
    carrier_due_at: datetime,
) -> Record:
    async with db.transaction() as conn:
        conversation_id = await conversations.touch(
            conn,
            workspace_id=workspace_id,
            number_id=number_id,
            contact=to_number,
            kind="sms_message",
            incoming=False,
            at=now,
        )
        row = await fetch_one(
            conn,
            f"""
            INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction,
                from_number, to_number, text, media, status, created_at, updated_at,
                carrier_due_at)
            VALUES ($1, $2, $3, $4, 'outgoing', $5, $6, $7, '[]', 'queued', $8, $8, $9)
            RETURNING {COLUMNS}
            """,
            ids.new_id(ids.MESSAGE),
            workspace_id,
            number_id,
            conversation_id,
            from_number,
            to_number,
            text,
            now,
            carrier_due_at,
        )
    db.wake(CARRIER_CHANNEL)
    return row


async def create_incoming(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    text: str,
    media: list[dict[str, str]],
    now: datetime,
) -> Record:
    async with db.transaction() as conn:
        conversation_id = await conversations.touch(
            conn,
            workspace_id=workspace_id,
            number_id=number_id,
            contact=from_number,
            kind="sms_message",
            incoming=True,
            at=now,
        )
        row = await fetch_one(
            conn,
            f"""
            INSERT INTO messages (id, workspace_id, number_id, conversation_id, direction,
                from_number, to_number, text, media, status, created_at, updated_at)
            VALUES ($1, $2, $3, $4, 'incoming', $5, $6, $7, $8, 'received', $9, $9)
            RETURNING {COLUMNS}
            """,
            ids.new_id(ids.MESSAGE),
            workspace_id,
            number_id,
            conversation_id,
            from_number,
            to_number,
            text,
            media,
            now,
        )
        await append_event(
            conn,
            workspace_id=workspace_id,
            event_type="message.received",
            number_id=number_id,
            data=resources.message(row),
            source="inbound",
            created_at=now,
        )
    db.wake(DELIVERIES_CHANNEL)
    return row


async def create_call(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    direction: str,
    status: str,
    duration_seconds: int | None,
    event_type: str,
    now: datetime,
) -> Record:
    incoming = direction == "incoming"
    async with db.transaction() as conn:
        conversation_id = await conversations.touch(
            conn,
            workspace_id=workspace_id,
            number_id=number_id,
            contact=from_number if incoming else to_number,
            kind="call_log",
            incoming=incoming,
            at=now,
        )
        row = await fetch_one(
            conn,
            f"""
            INSERT INTO calls (id, workspace_id, number_id, conversation_id, direction,
                from_number, to_number, status, duration_seconds, created_at)
            VALUES ($1, $2, $3, $4, $10, $5, $6, $7, $8, $9)
            RETURNING {CALL_COLUMNS}
            """,
            ids.new_id(ids.CALL),
            workspace_id,
            number_id,
            conversation_id,
            from_number,
            to_number,
            status,
            duration_seconds,
            now,
            direction,
        )
        await append_event(
            conn,
            workspace_id=workspace_id,
            event_type=event_type,
            number_id=number_id,
            data=resources.call(row),
            source="inbound",
            created_at=now,
        )
    db.wake(DELIVERIES_CHANNEL)
    return row


async def get(db: Database, workspace_id: str, message_id: str) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            f"SELECT {COLUMNS} FROM messages WHERE workspace_id = $1 AND id = $2",
            workspace_id,
            message_id,
        )
    return row


async def list_page(
    db: Database,
    workspace_id: str,
    *,
    number_id: str | None,
    contact: str | None,
    direction: str | None,
    limit: int,
    after: Position | None,
) -> Page:
    filters = Filters().add("workspace_id = {}", workspace_id)
    if number_id is not None:
        filters.add("number_id = {}", number_id)
    if contact is not None:
        # The contact is the other end: `to` for outgoing, `from` for incoming.
        filters.add(
            "CASE WHEN direction = 'outgoing' THEN to_number ELSE from_number END = {}", contact
        )
    if direction is not None:
        filters.add("direction = {}", direction)
    async with db.acquire() as conn:
        return await fetch_page(conn, f"SELECT {COLUMNS} FROM messages", filters, limit, after)


async def claim_carrier_due(conn: Connection, now: datetime, limit: int) -> Sequence[Record]:
    """Outgoing messages the carrier should move along now (inside the caller's transaction)."""
    rows: Sequence[Record] = await conn.fetch(
        f"""
        SELECT {COLUMNS} FROM messages
        WHERE status IN ('queued', 'sent') AND carrier_due_at <= $1
        ORDER BY carrier_due_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
        """,
        now,
        limit,
    )
    return rows


async def move_status(
    conn: Connection,
    message_id: str,
    status: str,
    *,
    now: datetime,
    carrier_due_at: datetime | None,
    event_type: str | None,
) -> Record:
    """Move a message to `status`; appends `event_type` (if any) in the same transaction."""
    row = await fetch_one(
        conn,
        f"UPDATE messages SET status = $2, updated_at = $3, carrier_due_at = $4 "
        f"WHERE id = $1 RETURNING {COLUMNS}",
        message_id,
        status,
        now,
        carrier_due_at,
    )
    if event_type is not None:
        data: dict[str, Any] = resources.message(row)
        await append_event(
            conn,
            workspace_id=row["workspace_id"],
            event_type=event_type,
            number_id=row["number_id"],
            data=data,
            source="carrier",
            created_at=now,
        )
    return row


async def next_carrier_due(db: Database) -> datetime | None:
    async with db.acquire() as conn:
        due: datetime | None = await conn.fetchval(
            "SELECT min(carrier_due_at) FROM messages WHERE status IN ('queued', 'sent')"
        )
    return due

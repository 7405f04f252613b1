"""Conversation threads: one per (workspace number, contact). Statements in
queries/conversations.sql; a thread is made or updated by the statement that writes its item
(messages.py), with conversations.sql's `touch` as its first step."""

from __future__ import annotations

from dispatcher.store.database import Database, Record
from dispatcher.store.pages import Filters, Page, Position, fetch_page
from dispatcher.store.queries import Queries


class SQL(Queries, file="conversations.sql"):
    touch: str
    conversation: str
    set_status: str
    conversations_page: str


async def get(db: Database, workspace_id: str, conversation_id: str) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(SQL.conversation, workspace_id, conversation_id)
    return row


async def set_status(
    db: Database, workspace_id: str, conversation_id: str, status: str
) -> Record | None:
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            SQL.set_status, workspace_id, conversation_id, status
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
        return await fetch_page(conn, SQL.conversations_page, filters, limit, after)

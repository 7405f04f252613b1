"""Conversation threads: one per (workspace number, contact). Statements in
queries/conversations.sql; a thread is made or updated by the statement that writes its item
(messages.sql's `create_` statements, their first step)."""

from __future__ import annotations

from dispatcher.domain.enums import ConversationStatus
from dispatcher.store.database import Database
from dispatcher.store.pages import Page, Position, fetch_page, paging
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import ConversationRow, fetch_row


class SQL(Queries, file="conversations.sql"):
    conversation: Statement
    set_status: Statement
    conversations_page: Statement


async def get(db: Database, workspace_id: str, conversation_id: str) -> ConversationRow | None:
    return await fetch_row(
        db,
        SQL.conversation(workspace_id=workspace_id, conversation_id=conversation_id),
        ConversationRow,
    )


async def set_status(
    db: Database, workspace_id: str, conversation_id: str, status: ConversationStatus
) -> ConversationRow | None:
    """Move the conversation to the folder `status`; None when the workspace has no such
    conversation."""
    return await fetch_row(
        db,
        SQL.set_status(workspace_id=workspace_id, conversation_id=conversation_id, status=status),
        ConversationRow,
    )


async def list_page(
    db: Database,
    workspace_id: str,
    *,
    status: str | None,
    number_id: str | None,
    limit: int,
    after: Position | None,
) -> Page[ConversationRow]:
    page = SQL.conversations_page(
        workspace_id=workspace_id, status=status, number_id=number_id, **paging(after, limit)
    )
    return await fetch_page(db, page, ConversationRow, limit)

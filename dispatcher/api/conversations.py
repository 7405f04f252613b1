"""Conversations: list, read, move between folders."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import choice, id_of
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import Body
from dispatcher.domain import ids
from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import ConversationItemKind, ConversationStatus, Scope
from dispatcher.domain.resources import Timestamp
from dispatcher.store import conversations
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import ConversationRow
from dispatcher.store.workspaces import ApiKey


class Conversation(TypedDict):
    """The thread of messages and calls between one workspace number and one contact."""

    id: str
    contact: str
    createdAt: Timestamp
    lastItemAt: Timestamp
    lastItemKind: ConversationItemKind | None
    numberId: str
    status: ConversationStatus


def conversation(row: ConversationRow) -> Conversation:
    kind = row.last_item_kind
    return {
        "id": row.id,
        "contact": row.contact,
        "createdAt": isoformat(row.created_at),
        "lastItemAt": isoformat(row.last_item_at),
        "lastItemKind": None if kind is None else ConversationItemKind(kind),
        "numberId": row.number_id,
        "status": ConversationStatus(row.status),
    }


class SetConversationStatus(Body):
    status: ConversationStatus = Field(strict=False)


routes = Routes()


class ConversationQuery(PageQuery):
    status: Annotated[str | None, choice(ConversationStatus)] = None
    numberId: Annotated[str | None, id_of(ids.NUMBER)] = None


@routes.list("/v1/conversations", Scope.CONVERSATIONS_READ, conversation, cursor="conversations")
async def list_conversations(at: Listing, query: ConversationQuery) -> StorePage[ConversationRow]:
    return await conversations.list_page(
        at.db, at.workspace_id, status=query.status, number_id=query.numberId, **at.page
    )


@routes.get("/v1/conversations/{conversation_id}", Scope.CONVERSATIONS_READ, Conversation)
async def get_conversation(request: web.Request, svc: Services, key: ApiKey) -> Conversation:
    row = await conversations.get(svc.db, key.workspace_id, request.match_info["conversation_id"])
    return conversation(found(row, "conversation"))


@routes.post(
    "/v1/conversations/{conversation_id}/status",
    Scope.CONVERSATIONS_WRITE,
    Conversation,
    body=SetConversationStatus,
)
async def set_conversation_status(
    request: web.Request, svc: Services, key: ApiKey, body: SetConversationStatus
) -> Conversation:
    row = await conversations.set_status(
        svc.db, key.workspace_id, request.match_info["conversation_id"], body.status
    )
    return conversation(found(row, "conversation"))

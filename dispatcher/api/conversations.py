"""Conversations: list, read, move between folders."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import choice, id_of
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import SetConversationStatus
from dispatcher.api.resources import Conversation, conversation
from dispatcher.domain import ids
from dispatcher.domain.enums import ConversationStatus, Scope
from dispatcher.store import conversations
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import ConversationRow
from dispatcher.store.workspaces import ApiKey

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

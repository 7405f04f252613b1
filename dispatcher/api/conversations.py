"""Conversations: list, read, move between folders."""

from __future__ import annotations

from functools import partial

from aiohttp import web

from dispatcher.api.context import Services
from dispatcher.api.found import found
from dispatcher.api.http import json_response
from dispatcher.api.models import SetConversationStatus
from dispatcher.api.pagination import Pager
from dispatcher.api.query import choice, id_parameter, read_query
from dispatcher.api.resources import Conversation, Page, conversation
from dispatcher.api.routing import Routes
from dispatcher.domain import ids
from dispatcher.domain.enums import ConversationStatus, Scope
from dispatcher.store import conversations
from dispatcher.store.workspaces import ApiKey

routes = Routes()

FILTERS = (choice("status", ConversationStatus), id_parameter("numberId", ids.NUMBER))


@routes.get("/v1/conversations", Scope.CONVERSATIONS_READ, Page[Conversation], query=FILTERS)
async def list_conversations(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    filters = read_query(request, FILTERS)
    pager = Pager(request, svc.cursor_key, "conversations", filters)
    read = partial(
        conversations.list_page,
        svc.db,
        key.workspace_id,
        status=filters["status"],
        number_id=filters["numberId"],
    )
    return json_response(await pager.page(read, conversation))


@routes.get("/v1/conversations/{conversation_id}", Scope.CONVERSATIONS_READ, Conversation)
async def get_conversation(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    row = await conversations.get(svc.db, key.workspace_id, request.match_info["conversation_id"])
    return json_response(conversation(found(row, "conversation")))


@routes.post(
    "/v1/conversations/{conversation_id}/status",
    Scope.CONVERSATIONS_WRITE,
    Conversation,
    body=SetConversationStatus,
)
async def set_conversation_status(
    request: web.Request, svc: Services, key: ApiKey, body: SetConversationStatus
) -> web.Response:
    row = await conversations.set_status(
        svc.db, key.workspace_id, request.match_info["conversation_id"], body.status
    )
    return json_response(conversation(found(row, "conversation")))

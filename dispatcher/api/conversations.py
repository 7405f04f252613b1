"""Conversations: list, read, move between folders."""

from __future__ import annotations

from functools import partial

from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.found import found
from dispatcher.api.http import json_response, parse_body
from dispatcher.api.models import SetConversationStatus
from dispatcher.api.operations import operation
from dispatcher.api.pagination import Pager
from dispatcher.api.query import choice, id_parameter, read_query
from dispatcher.api.resources import Conversation, Page, conversation
from dispatcher.domain import ids
from dispatcher.domain.enums import ConversationStatus, Scope
from dispatcher.store import conversations
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()

FILTERS = (choice("status", ConversationStatus), id_parameter("numberId", ids.NUMBER))


@routes.get("/v1/conversations")
@requires(Scope.CONVERSATIONS_READ)
@operation(200, Page[Conversation], query=FILTERS)
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


@routes.get("/v1/conversations/{conversation_id}")
@requires(Scope.CONVERSATIONS_READ)
@operation(200, Conversation)
async def get_conversation(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    row = await conversations.get(svc.db, key.workspace_id, request.match_info["conversation_id"])
    return json_response(conversation(found(row, "conversation")))


@routes.post("/v1/conversations/{conversation_id}/status")
@requires(Scope.CONVERSATIONS_WRITE)
@operation(200, Conversation, body=SetConversationStatus)
async def set_conversation_status(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    body = await parse_body(request, SetConversationStatus)
    row = await conversations.set_status(
        svc.db, key.workspace_id, request.match_info["conversation_id"], body.status
    )
    return json_response(conversation(found(row, "conversation")))

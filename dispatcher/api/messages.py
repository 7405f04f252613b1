"""Messages: send, list, read."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.http import json_response, parse_body
from dispatcher.api.models import SendMessage
from dispatcher.api.pagination import Pager
from dispatcher.api.query import query_choice, query_e164, query_id
from dispatcher.domain import ids, resources
from dispatcher.errors import FieldError, NotFound, ValidationFailed
from dispatcher.store import messages, workspaces
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()


@routes.post("/v1/messages")
@requires("messages:write")
async def send_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    body = await parse_body(request, SendMessage)
    async with svc.db.acquire() as conn:
        number = await workspaces.find_number(conn, key.workspace_id, body.from_)
    if number is None:
        raise ValidationFailed(
            [FieldError("body.from", "must be one of the workspace's numbers (E.164 or PN… id)")]
        )
    now = svc.clock.now()
    row = await messages.create_outgoing(
        svc.db,
        workspace_id=key.workspace_id,
        number_id=number["id"],
        from_number=number["number"],
        to_number=body.to,
        text=body.text,
        now=now,
        carrier_due_at=now + timedelta(seconds=svc.settings.sandbox_delay),
    )
    return json_response(resources.message(row), status=202)


@routes.get("/v1/messages")
@requires("messages:read")
async def list_messages(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    filters = {
        "numberId": query_id(request, "numberId", ids.NUMBER),
        "contact": query_e164(request, "contact"),
        "direction": query_choice(request, "direction", ("incoming", "outgoing")),
    }
    pager = Pager(request, svc.cursor_key, "messages", filters)
    page = await messages.list_page(
        svc.db,
        key.workspace_id,
        number_id=filters["numberId"],
        contact=filters["contact"],
        direction=filters["direction"],
        limit=pager.limit,
        after=pager.after,
    )
    return json_response(pager.render(page, [resources.message(r) for r in page.rows]))


@routes.get("/v1/messages/{message_id}")
@requires("messages:read")
async def get_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    row = await messages.get(svc.db, key.workspace_id, request.match_info["message_id"])
    if row is None:
        raise NotFound("message not found")
    return json_response(resources.message(row))

"""The carrier side: messages and calls that arrived on a workspace's numbers."""

from __future__ import annotations

from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.http import json_response, parse_body
from dispatcher.api.models import InboundCall, InboundMessage
from dispatcher.domain import resources
from dispatcher.domain.events import CALL_STATUS_EVENTS
from dispatcher.errors import FieldError, ValidationFailed
from dispatcher.store import messages, workspaces
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()


@routes.post("/v1/inbound/messages")
@requires("ingest:write")
async def inbound_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    body = await parse_body(request, InboundMessage)
    async with svc.db.acquire() as conn:
        number = await workspaces.find_number(conn, key.workspace_id, body.to)
    if number is None:
        raise ValidationFailed([FieldError("body.to", "must be one of the workspace's numbers")])
    row = await messages.create_incoming(
        svc.db,
        workspace_id=key.workspace_id,
        number_id=number["id"],
        from_number=body.from_,
        to_number=body.to,
        text=body.text,
        media=[m.model_dump() for m in body.media],
        now=svc.clock.now(),
    )
    return json_response(resources.message(row), status=201)


@routes.post("/v1/inbound/calls")
@requires("ingest:write")
async def inbound_call(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """A call on a workspace number: incoming when `to` is ours, outgoing when `from` is."""
    body = await parse_body(request, InboundCall)
    async with svc.db.acquire() as conn:
        number = await workspaces.find_number(conn, key.workspace_id, body.to)
        direction = "incoming"
        if number is None:
            number = await workspaces.find_number(conn, key.workspace_id, body.from_)
            direction = "outgoing"
    if number is None:
        raise ValidationFailed(
            [FieldError("body.to", "`to` (or `from`) must be one of the workspace's numbers")]
        )
    row = await messages.create_call(
        svc.db,
        workspace_id=key.workspace_id,
        number_id=number["id"],
        from_number=body.from_,
        to_number=body.to,
        direction=direction,
        status=body.status,
        duration_seconds=body.durationSeconds,
        event_type=CALL_STATUS_EVENTS[body.status],
        now=svc.clock.now(),
    )
    return json_response(resources.call(row), status=201)

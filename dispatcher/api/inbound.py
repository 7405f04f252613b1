"""The carrier side: messages and calls that arrived on a workspace's numbers."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from aiohttp import web

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import InboundCall, InboundMessage
from dispatcher.api.numbers import not_the_workspaces, own_number
from dispatcher.api.resources import Call, Message, MessageMedia, call, message
from dispatcher.domain.enums import Direction, Scope
from dispatcher.domain.events import CALL_STATUS_EVENTS
from dispatcher.store import messages, workspaces
from dispatcher.store.workspaces import ApiKey, PhoneNumber

routes = Routes()


class _Arrival(TypedDict):
    """What the store records a message or a call that arrived with, whichever it is (the
    keywords `messages.create_incoming` and `messages.create_call` share)."""

    workspace_id: str
    number_id: str
    from_number: str
    to_number: str
    now: datetime


def _arrival(
    svc: Services, key: ApiKey, number: PhoneNumber, body: InboundMessage | InboundCall
) -> _Arrival:
    """On `number` of the key's workspace, between the two ends as the carrier sent them,
    now."""
    return {
        "workspace_id": key.workspace_id,
        "number_id": number.id,
        "from_number": body.from_,
        "to_number": body.to,
        "now": svc.clock.now(),
    }


@routes.post("/v1/inbound/messages", Scope.INGEST_WRITE, Message, status=201, body=InboundMessage)
async def inbound_message(
    request: web.Request, svc: Services, key: ApiKey, body: InboundMessage
) -> Message:
    number = await own_number(svc, key.workspace_id, "body.to", body.to, e164=True)
    row = await messages.create_incoming(
        svc.db,
        **_arrival(svc, key, number, body),
        text=body.text,
        media=[MessageMedia(contentType=m.contentType, url=m.url) for m in body.media],
    )
    return message(row)


@routes.post("/v1/inbound/calls", Scope.INGEST_WRITE, Call, status=201, body=InboundCall)
async def inbound_call(request: web.Request, svc: Services, key: ApiKey, body: InboundCall) -> Call:
    """A call on a workspace number: incoming when `to` is ours, outgoing when `from` is."""
    found = await workspaces.find_numbers(
        svc.db, key.workspace_id, [body.to, body.from_], e164=True
    )
    if body.to in found:
        number, direction = found[body.to], Direction.INCOMING
    elif body.from_ in found:
        number, direction = found[body.from_], Direction.OUTGOING
    else:
        raise not_the_workspaces("body.to", [body.to, body.from_])
    row = await messages.create_call(
        svc.db,
        **_arrival(svc, key, number, body),
        direction=direction,
        status=body.status,
        duration_seconds=body.durationSeconds,
        event_type=CALL_STATUS_EVENTS[body.status],
    )
    return call(row)

"""The carrier side: messages and calls that arrived on a workspace's numbers."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, TypedDict

from aiohttp import web
from pydantic import AfterValidator, Field

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import E164, Body, WebhookUrl, _optional_name, documented
from dispatcher.api.numbers import not_the_workspaces, own_number
from dispatcher.api.resources import Call, Message, MessageMedia, call, message
from dispatcher.domain.enums import CallStatus, Direction, Scope
from dispatcher.domain.events import CALL_STATUS_EVENTS
from dispatcher.domain.text import visible_text_pattern
from dispatcher.store import messages, workspaces
from dispatcher.store.workspaces import ApiKey, PhoneNumber

# RFC 6838 type/subtype names, optionally with `; name=value` parameters (around the `;`,
# RFC 9110's optional white space: spaces and tabs). Written so that it is also an ECMA-262
# pattern (no `\s`, no escaped quote), as the document states it.
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r'(?:[ \t]*;[ \t]*[A-Za-z0-9!#$&^_.+-]+=(?:[A-Za-z0-9!#$&^_.+-]+|"[^"\\\x00-\x1f]*"))*'
)


def _media_type(value: str) -> str:
    if not _MEDIA_TYPE.fullmatch(value):
        raise ValueError("must be a media type like image/jpeg")
    return value


class Media(Body):
    contentType: Annotated[
        str,
        Field(min_length=1, max_length=255),
        AfterValidator(_media_type),
        documented(f"^{_MEDIA_TYPE.pattern}$"),
    ]
    url: WebhookUrl


class InboundMessage(Body):
    from_: E164 = Field(alias="from")
    to: E164
    # "" stays possible (a carrier may hand over an empty text, e.g. with media only).
    text: Annotated[
        str,
        Field(max_length=1600),
        AfterValidator(_optional_name),
        documented(lambda: visible_text_pattern(may_be_empty=True)),
    ]
    media: list[Media] = Field(default_factory=list, max_length=10)


class InboundCall(Body):
    from_: E164 = Field(alias="from")
    to: E164
    status: CallStatus = Field(strict=False)
    durationSeconds: int | None = Field(default=None, ge=0, le=7 * 86400)


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

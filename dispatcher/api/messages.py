"""Messages: send, list, read, and erase one's text."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import structlog
from aiohttp import web
from pydantic import Field

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.http import read_object, validate
from dispatcher.api.framework.idempotency import (
    IDEMPOTENCY_KEY,
    idempotency_key,
    request_fingerprint,
)
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import PHONE_NUMBER, choice, id_of
from dispatcher.api.framework.routing import Routes, WithHeaders
from dispatcher.api.models import E164, Body, MessageText, documented
from dispatcher.api.numbers import own_number
from dispatcher.api.resources import Message, message
from dispatcher.domain import ids
from dispatcher.domain.enums import Direction, Scope
from dispatcher.domain.phone import E164_PATTERN
from dispatcher.store import expunge, messages
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import MessageRow
from dispatcher.store.workspaces import ApiKey


class SendMessage(Body):
    from_: Annotated[
        str,
        documented(
            f"^(?:{E164_PATTERN}|{ids.NUMBER}[0-9a-f]{{32}})$",
            description="one of the workspace's numbers: its E.164 form or its id",
        ),
    ] = Field(alias="from", min_length=1, max_length=64)
    to: E164
    text: MessageText


routes = Routes()
log = structlog.get_logger("dispatcher.api")


class MessageQuery(PageQuery):
    numberId: Annotated[str | None, id_of(ids.NUMBER)] = None
    contact: Annotated[str | None, PHONE_NUMBER] = None
    direction: Annotated[str | None, choice(Direction)] = None


@routes.post(
    "/v1/messages",
    Scope.MESSAGES_WRITE,
    Message,
    status=202,
    body_parsed_by_handler=SendMessage,
    headers=(IDEMPOTENCY_KEY,),
    errors=(422,),
)
async def send_message(request: web.Request, svc: Services, key: ApiKey) -> WithHeaders[Message]:
    """202 with the queued message. With `Idempotency-Key` (the rules of POST /v1/events), the
    identical request within 24 hours answers the first message as it is now (and
    `Idempotent-Replayed: true`) and sends nothing, so a client retrying a send that timed out
    never sends the text twice; another request under that key is 422
    `idempotency_key_reused` and sends nothing."""
    key_sent = idempotency_key(request)
    raw = await read_object(request)
    body = validate(SendMessage, raw, "body")
    # `from` may be the number's id or its E.164 form.
    number = await own_number(svc, key.workspace_id, "body.from", body.from_, e164=True)
    now = svc.clock.now()
    row, created = await messages.create_outgoing(
        svc.db,
        workspace_id=key.workspace_id,
        number_id=number.id,
        from_number=number.number,
        to_number=body.to,
        text=body.text,
        now=now,
        carrier_due_at=now + timedelta(seconds=svc.settings.sandbox_delay),
        idempotency_key=key_sent,
        fingerprint=None if key_sent is None else request_fingerprint(svc.cursor_key, raw),
    )
    headers = {} if created else {"Idempotent-Replayed": "true"}
    return WithHeaders(message(row), headers)


@routes.list("/v1/messages", Scope.MESSAGES_READ, message, cursor="messages")
async def list_messages(at: Listing, query: MessageQuery) -> StorePage[MessageRow]:
    return await messages.list_page(
        at.db,
        at.workspace_id,
        number_id=query.numberId,
        contact=query.contact,
        direction=query.direction,
        **at.page,
    )


@routes.get("/v1/messages/{message_id}", Scope.MESSAGES_READ, Message)
async def get_message(request: web.Request, svc: Services, key: ApiKey) -> Message:
    row = await messages.get(svc.db, key.workspace_id, request.match_info["message_id"])
    return message(found(row, "message"))


@routes.post("/v1/messages/{message_id}/expunge", Scope.MESSAGES_WRITE, Message)
async def expunge_message(request: web.Request, svc: Services, key: ApiKey) -> Message:
    """Erase the message's text (personal data): `text` null and `expunged` true, here and in
    the `data` of every event that carried it (their deliveries not yet sent go without it).
    Answers the message; again, the same."""
    erased = await expunge.message(
        svc.db, key.workspace_id, request.match_info["message_id"], svc.clock.now()
    )
    row = found(erased, "message")
    log.info("message.expunged", workspace_id=key.workspace_id, message_id=row.id)
    return message(row)

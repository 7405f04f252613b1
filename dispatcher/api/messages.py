"""Messages: send, list, read, and erase one's text."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import structlog
from aiohttp import web

from dispatcher.api.context import Services
from dispatcher.api.found import found
from dispatcher.api.http import json_response, read_object, validate
from dispatcher.api.idempotency import IDEMPOTENCY_KEY, idempotency_key, request_fingerprint
from dispatcher.api.models import SendMessage
from dispatcher.api.numbers import own_number
from dispatcher.api.pagination import Pager
from dispatcher.api.query import choice, e164_parameter, id_parameter, read_query
from dispatcher.api.resources import Message, Page, message
from dispatcher.api.routing import Routes
from dispatcher.domain import ids
from dispatcher.domain.enums import Direction, Scope
from dispatcher.store import expunge, messages
from dispatcher.store.workspaces import ApiKey

routes = Routes()
log = structlog.get_logger("dispatcher.api")

FILTERS = (
    id_parameter("numberId", ids.NUMBER),
    e164_parameter("contact"),
    choice("direction", Direction),
)


@routes.post(
    "/v1/messages",
    Scope.MESSAGES_WRITE,
    Message,
    status=202,
    body_parsed_by_handler=SendMessage,
    headers=(IDEMPOTENCY_KEY,),
    errors=(422,),
)
async def send_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
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
    return json_response(message(row), status=202, headers=headers)


@routes.get("/v1/messages", Scope.MESSAGES_READ, Page[Message], query=FILTERS)
async def list_messages(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    filters = read_query(request, FILTERS)
    pager = Pager(request, svc.cursor_key, "messages", filters)
    read = partial(
        messages.list_page,
        svc.db,
        key.workspace_id,
        number_id=filters["numberId"],
        contact=filters["contact"],
        direction=filters["direction"],
    )
    return json_response(await pager.page(read, message))


@routes.get("/v1/messages/{message_id}", Scope.MESSAGES_READ, Message)
async def get_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    row = await messages.get(svc.db, key.workspace_id, request.match_info["message_id"])
    return json_response(message(found(row, "message")))


@routes.post("/v1/messages/{message_id}/expunge", Scope.MESSAGES_WRITE, Message)
async def expunge_message(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """Erase the message's text (personal data): `text` null and `expunged` true, here and in
    the `data` of every event that carried it (their deliveries not yet sent go without it).
    Answers the message; again, the same."""
    erased = await expunge.message(
        svc.db, key.workspace_id, request.match_info["message_id"], svc.clock.now()
    )
    row = found(erased, "message")
    log.info("message.expunged", workspace_id=key.workspace_id, message_id=row.id)
    return json_response(message(row))

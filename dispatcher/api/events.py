"""Publishing events directly (the API door of the three)."""

from __future__ import annotations

import orjson
from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.http import json_response, parse_body
from dispatcher.api.models import PublishEvent
from dispatcher.errors import FieldError, ValidationFailed
from dispatcher.store import events, workspaces
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()

MAX_IDEMPOTENCY_KEY = 255


@routes.post("/v1/events")
@requires("events:write")
async def publish_event(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """202 with the event envelope. With `Idempotency-Key`, a repeat within 24 hours answers
    the first event (and `Idempotent-Replayed: true`) and creates nothing."""
    idempotency_key = request.headers.get("Idempotency-Key")
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise ValidationFailed(
            [FieldError("header.Idempotency-Key", f"must be 1..{MAX_IDEMPOTENCY_KEY} characters")]
        )
    body = await parse_body(request, PublishEvent)
    if body.numberId is not None:
        async with svc.db.acquire() as conn:
            if await workspaces.missing_numbers(conn, key.workspace_id, [body.numberId]):
                raise ValidationFailed(
                    [FieldError("body.numberId", "must be one of the workspace's numbers")]
                )
    payload, created = await events.publish(
        svc.db,
        workspace_id=key.workspace_id,
        event_type=body.type,
        number_id=body.numberId,
        data=body.data,
        idempotency_key=idempotency_key,
        now=svc.clock.now(),
    )
    headers = {} if created else {"Idempotent-Replayed": "true"}
    return json_response(orjson.Fragment(payload), status=202, headers=headers)

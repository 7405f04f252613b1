"""Publishing events directly (the API door of the three)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson
from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.http import json_response, read_object, single_header, validate
from dispatcher.api.models import PublishEvent
from dispatcher.api.numbers import own_number
from dispatcher.api.operations import HeaderParameter, operation
from dispatcher.api.resources import EventEnvelope
from dispatcher.domain.enums import Scope
from dispatcher.errors import FieldError, ValidationFailed
from dispatcher.store import events
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()

MAX_IDEMPOTENCY_KEY = 255
# Visible ASCII (the IETF Idempotency-Key draft's key is a string of it): a header byte outside
# it arrives as a lone surrogate that the database cannot store, or as a look-alike of another
# key.
_IDEMPOTENCY_KEY = re.compile(rf"[!-~]{{1,{MAX_IDEMPOTENCY_KEY}}}")
IDEMPOTENCY_KEY = HeaderParameter(
    "Idempotency-Key", {"type": "string", "pattern": f"^{_IDEMPOTENCY_KEY.pattern}$"}
)


def request_fingerprint(body: dict[str, Any]) -> bytes:
    """SHA-256 of the body as a JSON value: keys sorted, no white space. Two requests have the
    same fingerprint when they say the same thing, however their JSON was written (key order,
    spacing, escapes), and different ones when any value or list order differs."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


@routes.post("/v1/events")
@requires(Scope.EVENTS_WRITE)
@operation(202, EventEnvelope, body=PublishEvent, headers=(IDEMPOTENCY_KEY,), errors=(422,))
async def publish_event(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """202 with the event envelope. With `Idempotency-Key`, the identical request within 24
    hours answers the first event (and `Idempotent-Replayed: true`) and creates nothing;
    another request under that key is 422 `idempotency_key_reused` and creates nothing."""
    idempotency_key = single_header(request, "Idempotency-Key")
    if idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise ValidationFailed(
            [
                FieldError(
                    "header.Idempotency-Key",
                    f"must be 1..{MAX_IDEMPOTENCY_KEY} visible ASCII characters (no spaces)",
                )
            ]
        )
    raw = await read_object(request)
    body = validate(PublishEvent, raw, "body")
    if body.numberId is not None:
        await own_number(svc, key.workspace_id, "body.numberId", body.numberId)
    payload, created = await events.publish(
        svc.db,
        workspace_id=key.workspace_id,
        event_type=body.type,
        number_id=body.numberId,
        data=body.data,
        idempotency_key=idempotency_key,
        fingerprint=None if idempotency_key is None else request_fingerprint(raw),
        now=svc.clock.now(),
    )
    headers = {} if created else {"Idempotent-Replayed": "true"}
    # The stored envelope, embedded as it is: never parsed and re-serialised.
    return json_response(orjson.Fragment(payload), status=202, headers=headers)

"""Pull delivery: a poll webhook's events, read by its consumer (docs/webhooks.md, "Poll
mode"; the position's rules: domain/poll.py).

`GET /v1/webhooks/{webhook_id}/poll?iterator=…&limit=…` answers, oldest first, the events the
webhook's filters select, each as the envelope a push delivery sends (the event's stored
payload, embedded as it is), with the `iterator` to send next and whether the page took every
event there was (`done`). Without an iterator a consumer starts now, or at `since`.

The scope is `webhooks:poll` (a key with `webhooks:read` may poll too); a key limited to one
webhook (its `webhookId`, docs/admin.md) polls that webhook only: any other is a 403.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import not_found
from dispatcher.api.framework.query import Query, Rule, instant, integer
from dispatcher.api.framework.routing import Routes
from dispatcher.api.resources import StoredEnvelope
from dispatcher.domain.clock import parse_instant
from dispatcher.domain.enums import Scope
from dispatcher.domain.poll import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Position,
    WebhookMode,
    decode_iterator,
    encode_iterator,
    is_iterator,
)
from dispatcher.errors import Conflict, FieldError, Forbidden, ValidationFailed
from dispatcher.store import poll
from dispatcher.store.workspaces import ApiKey

ITERATOR = Rule(
    is_iterator,
    "must be an iterator a poll of this service answered",
    {"type": "string", "description": "the `iterator` of the previous poll's answer"},
)


class PollQuery(Query):
    iterator: Annotated[str | None, ITERATOR] = None
    limit: Annotated[int, integer(1, MAX_LIMIT, default=DEFAULT_LIMIT)] = DEFAULT_LIMIT
    since: Annotated[
        str | None,
        instant("without an iterator: start with the events created at or after this time"),
    ] = None


class PolledEvents(TypedDict):
    """A page of a poll webhook's events: their envelopes as a push delivery sends them,
    oldest first; the iterator to send next; whether this page took every event there was
    (then poll again later, with the iterator)."""

    data: list[StoredEnvelope]
    iterator: str
    done: bool


routes = Routes()


@routes.get(
    "/v1/webhooks/{webhook_id}/poll",
    Scope.WEBHOOKS_POLL,
    PolledEvents,
    query=PollQuery,
    errors=(409,),
)
async def poll_webhook(request: web.Request, svc: Services, key: ApiKey) -> PolledEvents:
    """The webhook's next events after the iterator (without one: from now, or from
    `since`), oldest first, as the envelopes a push delivery sends."""
    query = PollQuery.parse(request.query)
    webhook_id = request.match_info["webhook_id"]
    if key.webhook_id is not None and key.webhook_id != webhook_id:
        raise Forbidden(f"this API key may poll webhook {key.webhook_id} only")
    position: Position | None = None  # a consumer that starts now
    if query.iterator is not None:
        if query.since is not None:
            raise ValidationFailed(
                [FieldError("query.since", "must not be sent with an iterator (it carries it)")]
            )
        position = decode_iterator(query.iterator)
        assert position is not None  # the query's rule checked it
    elif query.since is not None:
        position = Position(0, "", parse_instant(query.since))
    page = await poll.page(svc.db, key.workspace_id, webhook_id, position, query.limit)
    if page is None:
        raise not_found("webhook")
    if page.mode != WebhookMode.POLL:
        raise Conflict(f"webhook {webhook_id} is a push webhook: its events are POSTed to its url")
    if page.disabled:
        raise Conflict(f"webhook {webhook_id} is disabled: enable it to poll")
    return {
        "data": [orjson.Fragment(payload) for payload in page.payloads],
        "iterator": encode_iterator(page.position),
        "done": page.done,
    }

"""The attempt log: every attempt of a delivery, and every attempt to an endpoint."""

from __future__ import annotations

from functools import partial

from aiohttp import web

from dispatcher.api.context import Services
from dispatcher.api.found import found
from dispatcher.api.http import json_response
from dispatcher.api.pagination import Pager
from dispatcher.api.query import choice, instant_parameter, read_query, read_time_range
from dispatcher.api.resources import Attempt, Page, attempt
from dispatcher.api.routing import Routes
from dispatcher.domain.enums import Scope
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.store import attempts, deliveries, webhooks
from dispatcher.store.workspaces import ApiKey

routes = Routes()

SINCE = instant_parameter("since", "attempts started at or after this time (inclusive)")
UNTIL = instant_parameter("until", "attempts started before this time (exclusive)")
WEBHOOK_ATTEMPT_FILTERS = (choice("outcome", AttemptOutcome), SINCE, UNTIL)


@routes.get(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/attempts",
    Scope.WEBHOOKS_READ,
    Page[Attempt],
)
async def list_delivery_attempts(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """A delivery's attempts, newest first."""
    webhook_id = request.match_info["webhook_id"]
    delivery_id = request.match_info["delivery_id"]
    pager = Pager(
        request, svc.cursor_key, "attempts", {"webhookId": webhook_id, "deliveryId": delivery_id}
    )
    row = await deliveries.get(svc.db, key.workspace_id, webhook_id, delivery_id)
    created_at = found(row, "delivery").created_at
    read = partial(attempts.list_for_delivery, svc.db, webhook_id, delivery_id, created_at)
    return json_response(await pager.page(read, attempt))


@routes.get(
    "/v1/webhooks/{webhook_id}/attempts",
    Scope.WEBHOOKS_READ,
    Page[Attempt],
    query=WEBHOOK_ATTEMPT_FILTERS,
)
async def list_webhook_attempts(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """Every attempt to an endpoint, newest first, by outcome and start time."""
    webhook_id = request.match_info["webhook_id"]
    filters = {"webhookId": webhook_id, **read_query(request, WEBHOOK_ATTEMPT_FILTERS)}
    since, until = read_time_range(request, SINCE, UNTIL)
    pager = Pager(request, svc.cursor_key, "webhook-attempts", filters)
    await webhooks.require_readable(svc.db, key.workspace_id, webhook_id)
    read = partial(
        attempts.list_for_webhook,
        svc.db,
        webhook_id,
        outcome=filters["outcome"],
        since=since,
        until=until,
    )
    return json_response(await pager.page(read, attempt))

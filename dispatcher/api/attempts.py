"""The attempt log: every attempt of a delivery, and every attempt to an endpoint."""

from __future__ import annotations

from aiohttp import web

from dispatcher.api.context import Services, requires
from dispatcher.api.http import json_response
from dispatcher.api.operations import operation
from dispatcher.api.pagination import Pager
from dispatcher.api.query import choice, instant_parameter, read_query, read_time_range
from dispatcher.api.resources import Attempt, Page, attempt
from dispatcher.domain.enums import Scope
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.errors import NotFound
from dispatcher.store import attempts, deliveries, webhooks
from dispatcher.store.workspaces import ApiKey

routes = web.RouteTableDef()

SINCE = instant_parameter("since", "attempts started at or after this time (inclusive)")
UNTIL = instant_parameter("until", "attempts started before this time (exclusive)")
WEBHOOK_ATTEMPT_FILTERS = (choice("outcome", AttemptOutcome), SINCE, UNTIL)


@routes.get("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/attempts")
@requires(Scope.WEBHOOKS_READ)
@operation(200, Page[Attempt])
async def list_delivery_attempts(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """A delivery's attempts, newest first."""
    webhook_id = request.match_info["webhook_id"]
    delivery_id = request.match_info["delivery_id"]
    pager = Pager(
        request, svc.cursor_key, "attempts", {"webhookId": webhook_id, "deliveryId": delivery_id}
    )
    found = await deliveries.get(svc.db, key.workspace_id, webhook_id, delivery_id)
    if found is None:
        raise NotFound("delivery not found")
    page = await attempts.list_for_delivery(
        svc.db,
        webhook_id,
        delivery_id,
        found.created_at,
        limit=pager.limit,
        after=pager.after,
    )
    return json_response(pager.render(page, [attempt(row) for row in page.rows]))


@routes.get("/v1/webhooks/{webhook_id}/attempts")
@requires(Scope.WEBHOOKS_READ)
@operation(200, Page[Attempt], query=WEBHOOK_ATTEMPT_FILTERS)
async def list_webhook_attempts(request: web.Request, svc: Services, key: ApiKey) -> web.Response:
    """Every attempt to an endpoint, newest first, by outcome and start time."""
    webhook_id = request.match_info["webhook_id"]
    filters = {"webhookId": webhook_id, **read_query(request, WEBHOOK_ATTEMPT_FILTERS)}
    since, until = read_time_range(request, SINCE, UNTIL)
    pager = Pager(request, svc.cursor_key, "webhook-attempts", filters)
    await webhooks.require_readable(svc.db, key.workspace_id, webhook_id)
    page = await attempts.list_for_webhook(
        svc.db,
        webhook_id,
        outcome=filters["outcome"],
        since=since,
        until=until,
        limit=pager.limit,
        after=pager.after,
    )
    return json_response(pager.render(page, [attempt(row) for row in page.rows]))

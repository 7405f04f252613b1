"""Endpoint health: how a webhook's deliveries and attempts went over a recent window, read from
rollups (store/stats.py), so it answers as fast for a million attempts as for ten."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.query import Query, choice
from dispatcher.api.framework.routing import Routes
from dispatcher.api.resources import (
    AttemptsPerMinute,
    WebhookStats,
    attempts_per_minute,
    webhook_stats,
)
from dispatcher.domain import health
from dispatcher.domain.enums import Scope
from dispatcher.domain.health import StatsWindow
from dispatcher.store import stats, webhooks
from dispatcher.store.workspaces import ApiKey

routes = Routes()

DEFAULT_WINDOW = StatsWindow.DAY


class StatsQuery(Query):
    window: Annotated[
        str,
        choice(
            StatsWindow,
            default=DEFAULT_WINDOW.value,
            description="how far back, in whole minutes from now",
        ),
    ] = DEFAULT_WINDOW.value


@routes.get("/v1/webhooks/{webhook_id}/stats", Scope.WEBHOOKS_READ, WebhookStats, query=StatsQuery)
async def get_webhook_stats(request: web.Request, svc: Services, key: ApiKey) -> WebhookStats:
    """An endpoint's deliveries, attempts, response times and failure clock over a window."""
    window = StatsWindow(StatsQuery.parse(request.query).window)
    webhook_id = request.match_info["webhook_id"]
    await webhooks.require_readable(svc.db, key.workspace_id, webhook_id)
    health = await stats.read(svc.db, webhook_id, svc.clock.now(), window)
    return webhook_stats(health)


@routes.get("/v1/webhooks/{webhook_id}/stats/minutes", Scope.WEBHOOKS_READ, AttemptsPerMinute)
async def get_webhook_attempts_per_minute(
    request: web.Request, svc: Services, key: ApiKey
) -> AttemptsPerMinute:
    """An endpoint's attempts minute by minute over the last hour, by outcome (the console's
    chart), from the minute rollups: at most 60 rows, however busy the endpoint."""
    webhook_id = request.match_info["webhook_id"]
    await webhooks.require_readable(svc.db, key.workspace_id, webhook_id)
    minutes = health.recent_minutes(svc.clock.now())
    counted = await stats.attempts_per_minute(svc.db, webhook_id, minutes[0])
    return attempts_per_minute(health.per_minute(minutes, counted))

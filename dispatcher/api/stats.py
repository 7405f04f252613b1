"""Endpoint health: how a webhook's deliveries and attempts went over a recent window, read from
rollups (store/stats.py), so it answers as fast for a million attempts as for ten."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated

from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.query import Query, choice
from dispatcher.api.framework.routing import Routes
from dispatcher.domain import health
from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.enums import DeliveryStatus, Scope
from dispatcher.domain.health import EndpointHealth, StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.resources import Timestamp
from dispatcher.store import stats, webhooks
from dispatcher.store.workspaces import ApiKey


class DeliveryCounts(TypedDict):
    """Deliveries created in the window, by status now."""

    pending: int
    delivered: int
    failed: int


class AttemptCounts(TypedDict):
    """Attempts started in the window, by outcome (every outcome, 0 included)."""

    success: int
    http_error: int
    timeout: int
    connection_error: int
    blocked: int


class MinuteAttempts(TypedDict):
    """The attempts that started in one minute (`minute`: its start), by outcome."""

    minute: Timestamp
    attempts: AttemptCounts


class AttemptsPerMinute(TypedDict):
    """An endpoint's attempts minute by minute over the last hour, by outcome: 60 minutes,
    oldest first, the current (partial) one last; a minute without attempts counts 0."""

    minutes: list[MinuteAttempts]


class ResponseTimes(TypedDict):
    """Percentiles of the response times (ms) of the window's attempts that got an answer,
    read from a histogram: exact below 10 ms, else within 10%; null when none was answered."""

    p50: int | None
    p95: int | None
    p99: int | None


class WebhookStats(TypedDict):
    """An endpoint's health over a window counted in whole minutes back from now."""

    window: StatsWindow
    deliveries: DeliveryCounts
    attempts: AttemptCounts
    successRate: float | None
    responseMs: ResponseTimes
    lastSuccessAt: Timestamp | None
    lastFailureAt: Timestamp | None
    failingSince: Timestamp | None
    # Requests a second the endpoint gets now: its rate as the receiver's 429 answers adapted
    # it (flow control, docs/delivery.md), else its rateLimit; null: unrestricted.
    effectiveRateLimit: float | None


def attempt_counts(counts: Mapping[AttemptOutcome, int]) -> AttemptCounts:
    return {
        "success": counts[AttemptOutcome.SUCCESS],
        "http_error": counts[AttemptOutcome.HTTP_ERROR],
        "timeout": counts[AttemptOutcome.TIMEOUT],
        "connection_error": counts[AttemptOutcome.CONNECTION_ERROR],
        "blocked": counts[AttemptOutcome.BLOCKED],
    }


def attempts_per_minute(
    minutes: Sequence[tuple[datetime, Mapping[AttemptOutcome, int]]],
) -> AttemptsPerMinute:
    return {
        "minutes": [
            {"minute": isoformat(minute), "attempts": attempt_counts(counts)}
            for minute, counts in minutes
        ]
    }


def webhook_stats(health: EndpointHealth) -> WebhookStats:
    return {
        "window": health.window,
        "deliveries": {
            "pending": health.deliveries[DeliveryStatus.PENDING],
            "delivered": health.deliveries[DeliveryStatus.DELIVERED],
            "failed": health.deliveries[DeliveryStatus.FAILED],
        },
        "attempts": attempt_counts(health.attempts),
        "successRate": health.success_rate,
        "responseMs": {
            "p50": health.response_ms(50),
            "p95": health.response_ms(95),
            "p99": health.response_ms(99),
        },
        "lastSuccessAt": isoformat_or_none(health.last_success_at),
        "lastFailureAt": isoformat_or_none(health.last_failure_at),
        "failingSince": isoformat_or_none(health.failing_since),
        "effectiveRateLimit": health.effective_rate,
    }


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

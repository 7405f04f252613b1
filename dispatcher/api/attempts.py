"""The attempt log: every attempt of a delivery, and every attempt to an endpoint."""

from __future__ import annotations

from typing import Annotated

from typing_extensions import TypedDict

from dispatcher.api.framework.found import found
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import choice, instant
from dispatcher.api.framework.routing import Routes
from dispatcher.api.parents import InWebhook
from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import AttemptTrigger, Scope
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.resources import Timestamp
from dispatcher.store import attempts, deliveries
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import AttemptRow


class Attempt(TypedDict):
    """One attempt of a delivery, as it happened: when it started, what came back."""

    id: str
    deliveryId: str
    webhookId: str
    attemptNumber: int
    createdAt: Timestamp
    responseStatus: int | None
    responseMs: int
    outcome: AttemptOutcome
    error: str | None
    responseBody: str | None
    trigger: AttemptTrigger


def attempt(row: AttemptRow) -> Attempt:
    return {
        "id": row.id,
        "deliveryId": row.delivery_id,
        "webhookId": row.webhook_id,
        "attemptNumber": row.attempt_number,
        "createdAt": isoformat(row.created_at),
        "responseStatus": row.response_status,
        "responseMs": row.response_ms,
        "outcome": AttemptOutcome(row.outcome),
        "error": row.error,
        "responseBody": row.response_body,
        "trigger": AttemptTrigger(row.trigger),
    }


routes = Routes()


class WebhookAttemptQuery(PageQuery):
    outcome: Annotated[str | None, choice(AttemptOutcome)] = None
    since: Annotated[str | None, instant("attempts started at or after this time (inclusive)")] = (
        None
    )
    until: Annotated[str | None, instant("attempts started before this time (exclusive)")] = None


@routes.list(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/attempts",
    Scope.WEBHOOKS_READ,
    attempt,
    cursor="attempts",
)
async def list_delivery_attempts(at: Listing, query: PageQuery) -> StorePage[AttemptRow]:
    """A delivery's attempts, newest first."""
    webhook_id, delivery_id = at.path["webhook_id"], at.path["delivery_id"]
    row = await deliveries.get(at.db, at.workspace_id, webhook_id, delivery_id)
    created_at = found(row, "delivery").created_at
    return await attempts.list_for_delivery(at.db, webhook_id, delivery_id, created_at, **at.page)


@routes.list(
    "/v1/webhooks/{webhook_id}/attempts", Scope.WEBHOOKS_READ, attempt, cursor="webhook-attempts"
)
async def list_webhook_attempts(at: InWebhook, query: WebhookAttemptQuery) -> StorePage[AttemptRow]:
    """Every attempt to an endpoint, newest first, by outcome and start time."""
    return await attempts.list_for_webhook(
        at.db, at.path["webhook_id"], outcome=query.outcome, **query.time_range(), **at.page
    )

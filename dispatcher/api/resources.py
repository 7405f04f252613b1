"""What the API answers: one `TypedDict` per response resource, and the function that builds
it from a store row (Svix's `EndpointOut` with its `From<Model>`).

These types are the only description of the responses: mypy holds each builder to its type,
and the OpenAPI document (api/openapi.py) derives every response schema from them. The
resources events carry too (Message, Call, EventEnvelope) are the domain's
(domain/resources.py) and are re-exported here, so that this module lists every shape the API
answers. See domain/resources.py for why these are TypedDicts and not models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Generic, NotRequired, TypeVar

import orjson
from pydantic import GetPydanticSchema
from typing_extensions import TypedDict

from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.enums import (
    AttemptTrigger,
    ConversationItemKind,
    ConversationStatus,
    DeliveryStatus,
    DisabledReason,
    Ordering,
)
from dispatcher.domain.health import EndpointHealth, StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.resources import (
    Call,
    EventEnvelope,
    Message,
    MessageMedia,
    Row,
    Timestamp,
    call,
    message,
)

__all__ = [
    "Attempt",
    "Call",
    "Conversation",
    "Delivery",
    "DeliverySummary",
    "ErrorBody",
    "ErrorDetail",
    "Event",
    "EventEnvelope",
    "EventWithDeliveries",
    "Message",
    "MessageMedia",
    "Page",
    "Recovered",
    "Secret",
    "StoredEvent",
    "Webhook",
    "WebhookStats",
    "WebhookWithSecret",
    "attempt",
    "call",
    "conversation",
    "delivery",
    "event_with_deliveries",
    "message",
    "recovered",
    "secret",
    "stored_event",
    "webhook",
    "webhook_stats",
    "webhook_with_secret",
]

ItemT = TypeVar("ItemT")

# JSON stored once and embedded as it is (no parse and re-serialise): an `orjson.Fragment` at
# run time, documented as the envelope it holds.
StoredEnvelope = Annotated[
    orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(EventEnvelope))
]


class Page(TypedDict, Generic[ItemT]):
    """One page of a list, newest first; `nextCursor` is null on the last page."""

    data: list[ItemT]
    nextCursor: str | None


class Conversation(TypedDict):
    """The thread of messages and calls between one workspace number and one contact."""

    id: str
    contact: str
    createdAt: Timestamp
    lastItemAt: Timestamp
    lastItemKind: ConversationItemKind | None
    numberId: str
    status: ConversationStatus


class Webhook(TypedDict):
    """A subscription: which events go to which URL (its signing secret is read apart)."""

    id: str
    createdAt: Timestamp
    disabledAt: Timestamp | None
    disabledReason: DisabledReason | None
    events: list[str]
    name: str | None
    numberIds: list[str] | None
    url: str
    maxConcurrency: int
    rateLimit: int | None
    ordering: Ordering


class WebhookWithSecret(Webhook):
    """A webhook as created: the only answer that carries its secret besides the secret's own."""

    secret: str


class Secret(TypedDict):
    """A webhook's current signing secret (`whsec_…`)."""

    secret: str


class DeliverySummary(TypedDict):
    """Where an event went: one of its deliveries, in brief."""

    id: str
    webhookId: str
    status: DeliveryStatus
    attempts: int


class Event(EventEnvelope):
    """An event of the stream: its envelope as every delivery carries it, and its ordering
    key (null when it has none), which is not part of the envelope."""

    orderingKey: str | None


# An event as the stream lists it: its stored envelope embedded as it is, with its ordering
# key added at the end (no parse and re-serialise), documented as an Event.
StoredEvent = Annotated[orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(Event))]


class EventWithDeliveries(Event):
    """An event as it was published, with where it went: how many deliveries it has, and the
    first 100 of them (`GET /v1/events/{id}/deliveries` pages through all)."""

    deliveryCount: int
    deliveries: list[DeliverySummary]


class Delivery(TypedDict):
    """One event's delivery to one webhook, with its last attempt's result."""

    id: str
    webhookId: str
    attempts: int
    createdAt: Timestamp
    deliveredAt: Timestamp | None
    event: str
    lastError: str | None
    nextAttemptAt: Timestamp | None
    payload: StoredEnvelope
    responseMs: int | None
    responseStatus: int | None
    status: DeliveryStatus


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


class Recovered(TypedDict):
    """How many deliveries a recover queued."""

    queued: int


class ErrorDetail(TypedDict):
    """One field's problem: `path` is `body.<field>`, `query.<name>` or `header.<name>`."""

    path: str
    message: str


class ErrorBody(TypedDict):
    """Every error answer has this shape; `trace` is the answer's `X-Request-Id`."""

    status: int
    code: str
    title: str
    message: str
    errors: NotRequired[list[ErrorDetail]]
    trace: str


def conversation(row: Row) -> Conversation:
    return {
        "id": row["id"],
        "contact": row["contact"],
        "createdAt": isoformat(row["created_at"]),
        "lastItemAt": isoformat(row["last_item_at"]),
        "lastItemKind": row["last_item_kind"],
        "numberId": row["number_id"],
        "status": row["status"],
    }


def webhook(row: Row, default_concurrency: int) -> Webhook:
    return {
        "id": row["id"],
        "createdAt": isoformat(row["created_at"]),
        "disabledAt": isoformat_or_none(row["disabled_at"]),
        "disabledReason": row["disabled_reason"],
        "events": list(row["events"]),
        "name": row["name"],
        "numberIds": None if row["number_ids"] is None else list(row["number_ids"]),
        "url": row["url"],
        "maxConcurrency": row["max_concurrency"] or default_concurrency,
        "rateLimit": row["rate_limit"],
        "ordering": row["ordering"],
    }


def webhook_with_secret(row: Row, default_concurrency: int, secret: str) -> WebhookWithSecret:
    return {**webhook(row, default_concurrency), "secret": secret}


def secret(value: str) -> Secret:
    return {"secret": value}


def recovered(queued: int) -> Recovered:
    return {"queued": queued}


def attempt(row: Row) -> Attempt:
    return {
        "id": row["id"],
        "deliveryId": row["delivery_id"],
        "webhookId": row["webhook_id"],
        "attemptNumber": row["attempt_number"],
        "createdAt": isoformat(row["created_at"]),
        "responseStatus": row["response_status"],
        "responseMs": row["response_ms"],
        "outcome": row["outcome"],
        "error": row["error"],
        "responseBody": row["response_body"],
        "trigger": row["trigger"],
    }


def webhook_stats(health: EndpointHealth) -> WebhookStats:
    counts = health.attempts
    return {
        "window": health.window,
        "deliveries": {
            "pending": health.deliveries[DeliveryStatus.PENDING],
            "delivered": health.deliveries[DeliveryStatus.DELIVERED],
            "failed": health.deliveries[DeliveryStatus.FAILED],
        },
        "attempts": {
            "success": counts[AttemptOutcome.SUCCESS],
            "http_error": counts[AttemptOutcome.HTTP_ERROR],
            "timeout": counts[AttemptOutcome.TIMEOUT],
            "connection_error": counts[AttemptOutcome.CONNECTION_ERROR],
            "blocked": counts[AttemptOutcome.BLOCKED],
        },
        "successRate": health.success_rate,
        "responseMs": {
            "p50": health.response_ms(50),
            "p95": health.response_ms(95),
            "p99": health.response_ms(99),
        },
        "lastSuccessAt": isoformat_or_none(health.last_success_at),
        "lastFailureAt": isoformat_or_none(health.last_failure_at),
        "failingSince": isoformat_or_none(health.failing_since),
    }


def stored_event(row: Row) -> StoredEvent:
    """An event as the stream lists it: its envelope as it was stored and sent (embedded as
    it is, never re-serialised; the envelope is a JSON object, so it ends with its `}`), with
    `orderingKey` added as its last member."""
    payload: str = row["payload"]
    key = orjson.dumps(row["ordering_key"]).decode()
    return orjson.Fragment(f'{payload[:-1]},"orderingKey":{key}}}')


def event_with_deliveries(row: Row, deliveries: Sequence[Row], count: int) -> EventWithDeliveries:
    envelope: EventEnvelope = orjson.loads(row["payload"])
    return {
        **envelope,
        "orderingKey": row["ordering_key"],
        "deliveryCount": count,
        "deliveries": [
            {
                "id": d["id"],
                "webhookId": d["webhook_id"],
                "status": d["status"],
                "attempts": d["attempts"],
            }
            for d in deliveries
        ],
    }


def delivery(row: Row) -> Delivery:
    return {
        "id": row["id"],
        "webhookId": row["webhook_id"],
        "attempts": row["attempts"],
        "createdAt": isoformat(row["created_at"]),
        "deliveredAt": isoformat_or_none(row["delivered_at"]),
        "event": row["event_type"],
        "lastError": row["last_error"],
        "nextAttemptAt": isoformat_or_none(row["next_attempt_at"]),
        "payload": orjson.Fragment(row["payload"]),
        "responseMs": row["response_ms"],
        "responseStatus": row["response_status"],
        "status": row["status"],
    }

"""What the API answers: one `TypedDict` per response resource, and the function that builds
it from a store row (Svix's `EndpointOut` with its `From<Model>`): each builder takes the
store's typed row (store/rows.py), reads its attributes, and makes the enumerations' members
of the columns that hold them.

These types are the only description of the responses: mypy holds each builder to its type,
and the OpenAPI document (api/openapi.py) derives every response schema from them. The
resources events carry too (Message, Call, EventEnvelope) are the domain's
(domain/resources.py) and are re-exported here, so that this module lists every shape the API
answers. See domain/resources.py for why these are TypedDicts and not models.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Generic, NotRequired, TypeVar

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
    Scope,
)
from dispatcher.domain.headers import names_in_order
from dispatcher.domain.health import EndpointHealth, StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.resources import (
    Call,
    EventEnvelope,
    Message,
    MessageMedia,
    Timestamp,
    call,
    message,
)
from dispatcher.store.rows import (
    ApiKeyRow,
    AttemptRow,
    ConversationRow,
    DeliveryRow,
    EventRow,
    PhoneNumberRow,
    WebhookRow,
    WorkspaceRow,
)

__all__ = [
    "ApiKey",
    "Attempt",
    "AttemptsPerMinute",
    "Call",
    "Conversation",
    "Delivery",
    "DeliverySummary",
    "DemoDeliveries",
    "DemoDelivery",
    "ErrorBody",
    "ErrorDetail",
    "Event",
    "EventEnvelope",
    "EventWithDeliveries",
    "FilterMatch",
    "Me",
    "Message",
    "MessageMedia",
    "NewApiKey",
    "Page",
    "PhoneNumber",
    "PublishedEvents",
    "Recovered",
    "Secret",
    "StoredEvent",
    "Webhook",
    "WebhookStats",
    "WebhookWithSecret",
    "Workspace",
    "api_key",
    "attempt",
    "attempts_per_minute",
    "call",
    "conversation",
    "delivery",
    "event_with_deliveries",
    "filter_match",
    "me",
    "message",
    "new_api_key",
    "phone_number",
    "recovered",
    "secret",
    "stored_event",
    "webhook",
    "webhook_stats",
    "webhook_with_secret",
    "workspace",
]

ItemT = TypeVar("ItemT")

# JSON stored once and embedded as it is (no parse and re-serialise): an `orjson.Fragment` at
# run time, documented as the envelope it holds.
StoredEnvelope = Annotated[
    orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(EventEnvelope))
]


class Event(EventEnvelope):
    """An event of the workspace's stream: its envelope as stored (and sent), whether its
    content was expunged (then its `data` is null), and its ordering key (null when it has
    none), which is not part of the envelope."""

    expunged: bool
    orderingKey: str | None


# An event as the stream lists it: its stored envelope with `expunged` and `orderingKey`
# added, still never parsed (see `stored_event`).
StoredEvent = Annotated[orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(Event))]


class Page(TypedDict, Generic[ItemT]):
    """One page of a list, newest first; `nextCursor` is null on the last page."""

    data: list[ItemT]
    nextCursor: str | None


class PublishedEvents(TypedDict):
    """POST /v1/events/batch: each event's envelope, as POST /v1/events answers it, in the
    order of the request (stored, embedded as it is)."""

    data: list[StoredEnvelope]


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
    """A subscription: which events go to which URL (its signing secret is read apart), with
    the headers sent along (secret ones by name only) and its payload filter."""

    id: str
    createdAt: Timestamp
    disabledAt: Timestamp | None
    disabledReason: DisabledReason | None
    events: list[str]
    name: str | None
    numberIds: list[str] | None
    url: str
    maxConcurrency: int
    headers: dict[str, str]
    secretHeaderNames: list[str]
    filter: dict[str, Any] | None
    rateLimit: int | None
    ordering: Ordering


class WebhookWithSecret(Webhook):
    """A webhook as created: the only answer that carries its secret besides the secret's own."""

    secret: str


class FilterMatch(TypedDict):
    """Whether the data given contains the filter (`@>`), as fan-out would decide it."""

    matches: bool


class Secret(TypedDict):
    """A webhook's current signing secret (`whsec_…`)."""

    secret: str


class DeliverySummary(TypedDict):
    """Where an event went: one of its deliveries, in brief."""

    id: str
    webhookId: str
    status: DeliveryStatus
    attempts: int


class EventWithDeliveries(Event):
    """An event as it was published, with where it went: how many deliveries it has, and the
    first 100 of them (`GET /v1/events/{id}/deliveries` pages through all)."""

    deliveryCount: int
    deliveries: list[DeliverySummary]


class Delivery(TypedDict):
    """One event's delivery to one webhook, with its last attempt's result. `payload` is its
    event's envelope as stored: `data` is null once the event is expunged (`expunged`)."""

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
    expunged: bool


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


class Recovered(TypedDict):
    """How many deliveries a recover queued."""

    queued: int


class Workspace(TypedDict):
    """A tenant: its numbers, keys, webhooks and events are its own (the admin API's)."""

    id: str
    name: str
    createdAt: Timestamp


class PhoneNumber(TypedDict):
    """A number registered to a workspace (E.164); a number belongs to one workspace at most."""

    id: str
    number: str
    workspaceId: str
    createdAt: Timestamp


class ApiKey(TypedDict):
    """A workspace's API key as listed: never its value (only its hash is stored)."""

    id: str
    scopes: list[Scope]
    name: str | None
    createdAt: Timestamp
    revokedAt: Timestamp | None


class NewApiKey(TypedDict):
    """A key as created: the only answer that carries the key itself; store it now."""

    id: str
    key: str
    scopes: list[Scope]
    name: str | None
    createdAt: Timestamp


class DemoDelivery(TypedDict):
    """A request the demo receiver got (`GET /demo/receiver`; docs/webhooks.md): `verified`
    when its Standard Webhooks signature holds with a demo webhook's secret (`webhookId`,
    else null); `payload` is the body as JSON (null when it is not JSON)."""

    webhookId: str | None
    deliveryId: str | None
    eventType: str | None
    receivedAt: Timestamp
    verified: bool
    payload: Any


class DemoDeliveries(TypedDict):
    """The demo receiver's latest requests, newest first."""

    data: list[DemoDelivery]


class Me(TypedDict):
    """The key a request is made with: its workspace, its id, and what it may do (its scopes,
    in the order the API documents them)."""

    workspaceId: str
    keyId: str
    scopes: list[Scope]


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


def workspace(row: WorkspaceRow) -> Workspace:
    return {"id": row.id, "name": row.name, "createdAt": isoformat(row.created_at)}


def phone_number(row: PhoneNumberRow) -> PhoneNumber:
    return {
        "id": row.id,
        "number": row.number,
        "workspaceId": row.workspace_id,
        "createdAt": isoformat(row.created_at),
    }


def api_key(row: ApiKeyRow) -> ApiKey:
    return {
        "id": row.id,
        "scopes": [Scope(scope) for scope in row.scopes],
        "name": row.name,
        "createdAt": isoformat(row.created_at),
        "revokedAt": isoformat_or_none(row.revoked_at),
    }


def new_api_key(row: ApiKeyRow, key: str) -> NewApiKey:
    return {
        "id": row.id,
        "key": key,
        "scopes": [Scope(scope) for scope in row.scopes],
        "name": row.name,
        "createdAt": isoformat(row.created_at),
    }


def conversation(row: ConversationRow) -> Conversation:
    kind = row.last_item_kind
    return {
        "id": row.id,
        "contact": row.contact,
        "createdAt": isoformat(row.created_at),
        "lastItemAt": isoformat(row.last_item_at),
        "lastItemKind": None if kind is None else ConversationItemKind(kind),
        "numberId": row.number_id,
        "status": ConversationStatus(row.status),
    }


def webhook(row: WebhookRow, default_concurrency: int) -> Webhook:
    reason, options = row.disabled_reason, row.options
    return {
        "id": row.id,
        "createdAt": isoformat(row.created_at),
        "disabledAt": isoformat_or_none(row.disabled_at),
        "disabledReason": None if reason is None else DisabledReason(reason),
        "events": options.events,
        "name": options.name,
        "numberIds": options.number_ids,
        "url": options.url,
        "maxConcurrency": options.max_concurrency or default_concurrency,
        "headers": options.headers,
        "secretHeaderNames": names_in_order(options.secret_headers),
        "filter": options.payload_filter,
        "rateLimit": options.rate_limit,
        "ordering": Ordering(options.ordering),
    }


def webhook_with_secret(
    row: WebhookRow, default_concurrency: int, secret: str
) -> WebhookWithSecret:
    return {**webhook(row, default_concurrency), "secret": secret}


def secret(value: str) -> Secret:
    return {"secret": value}


def filter_match(matches: bool) -> FilterMatch:
    return {"matches": matches}


def recovered(queued: int) -> Recovered:
    return {"queued": queued}


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
    }


def me(workspace_id: str, key_id: str, scopes: Collection[str]) -> Me:
    return {
        "workspaceId": workspace_id,
        "keyId": key_id,
        "scopes": [scope for scope in Scope if scope in scopes],
    }


def stored_event(row: EventRow) -> StoredEvent:
    """An event as the stream lists it: its envelope as it was stored and sent (embedded as
    it is, never parsed and re-serialised; the envelope is a JSON object made by schema.sql's
    dispatcher_envelope, so it ends with its `}`), with `expunged` and `orderingKey` added as
    its last members."""
    expunged = "true" if row.expunged else "false"
    key = orjson.dumps(row.ordering_key).decode()
    return orjson.Fragment(f'{row.payload[:-1]},"expunged":{expunged},"orderingKey":{key}}}')


def event_with_deliveries(
    row: EventRow, deliveries: Sequence[DeliveryRow], count: int
) -> EventWithDeliveries:
    envelope: EventEnvelope = orjson.loads(row.payload)
    return {
        **envelope,
        "expunged": row.expunged,
        "orderingKey": row.ordering_key,
        "deliveryCount": count,
        "deliveries": [
            {
                "id": d.id,
                "webhookId": d.webhook_id,
                "status": DeliveryStatus(d.status),
                "attempts": d.attempts,
            }
            for d in deliveries
        ],
    }


def delivery(row: DeliveryRow) -> Delivery:
    return {
        "id": row.id,
        "webhookId": row.webhook_id,
        "attempts": row.attempts,
        "createdAt": isoformat(row.created_at),
        "deliveredAt": isoformat_or_none(row.delivered_at),
        "event": row.event_type,
        "lastError": row.last_error,
        "nextAttemptAt": isoformat_or_none(row.next_attempt_at),
        "payload": orjson.Fragment(row.payload),
        "responseMs": row.response_ms,
        "responseStatus": row.response_status,
        "status": DeliveryStatus(row.status),
        "expunged": row.expunged,
    }

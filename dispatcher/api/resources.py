"""What the API answers, for the webhook and its deliveries (each other resource's answers live in
its own module, api/<resource>.py, written the same way): one `TypedDict` per response
resource, and the function that builds it from a store row (Svix's `EndpointOut` with its
`From<Model>`): each builder takes the store's typed row (store/rows.py), reads its attributes,
and makes the enumerations' members of the columns that hold them.

These types are the only description of the responses: mypy holds each builder to its type, and
the OpenAPI document (api/framework/openapi.py) derives every response schema from them. The
resources events carry too (Message, Call, EventEnvelope) are the domain's
(domain/resources.py) and are re-exported here. See domain/resources.py for why these are
TypedDicts and not models.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import GetPydanticSchema
from typing_extensions import TypedDict

from dispatcher.api.framework.shapes import ErrorBody, ErrorDetail, Page
from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.enums import DeliveryStatus, DisabledReason, Ordering
from dispatcher.domain.headers import names_in_order
from dispatcher.domain.resources import (
    Call,
    EventEnvelope,
    Message,
    MessageMedia,
    Timestamp,
    call,
    message,
)
from dispatcher.store.rows import DeliveryRow, WebhookRow

__all__ = [
    "Call",
    "Delivery",
    "ErrorBody",
    "ErrorDetail",
    "EventEnvelope",
    "FilterMatch",
    "Message",
    "MessageMedia",
    "Page",
    "Recovered",
    "Secret",
    "Webhook",
    "WebhookWithSecret",
    "call",
    "delivery",
    "filter_match",
    "message",
    "recovered",
    "secret",
    "webhook",
    "webhook_with_secret",
]

ItemT = TypeVar("ItemT")

# JSON stored once and embedded as it is (no parse and re-serialise): an `orjson.Fragment` at
# run time, documented as the envelope it holds.
StoredEnvelope = Annotated[
    orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(EventEnvelope))
]


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


class Recovered(TypedDict):
    """How many deliveries a recover queued."""

    queued: int


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

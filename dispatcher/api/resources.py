"""What the API answers that more than one resource answers: a webhook's deliveries (the
webhook's and the event's routes list them); each resource's own answers live in its module,
api/<resource>.py, written the same way: one `TypedDict` per response
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

from typing import Annotated, TypeVar

import orjson
from pydantic import GetPydanticSchema
from typing_extensions import TypedDict

from dispatcher.api.framework.shapes import ErrorBody, ErrorDetail, Page
from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.enums import DeliveryStatus
from dispatcher.domain.resources import (
    Call,
    EventEnvelope,
    Message,
    MessageMedia,
    Timestamp,
    call,
    message,
)
from dispatcher.store.rows import DeliveryRow

__all__ = [
    "Call",
    "Delivery",
    "ErrorBody",
    "ErrorDetail",
    "EventEnvelope",
    "Message",
    "MessageMedia",
    "Page",
    "call",
    "delivery",
    "message",
]

ItemT = TypeVar("ItemT")

# JSON stored once and embedded as it is (no parse and re-serialise): an `orjson.Fragment` at
# run time, documented as the envelope it holds.
StoredEnvelope = Annotated[
    orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(EventEnvelope))
]


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

"""Events: publishing them directly (the API door of the three), reading the stream, and
expunging an event's content."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import orjson
import structlog
from aiohttp import web
from pydantic import AfterValidator, Field, GetPydanticSchema, field_validator
from typing_extensions import TypedDict

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.http import ApiError, read_object, validate
from dispatcher.api.framework.idempotency import (
    IDEMPOTENCY_KEY,
    IDEMPOTENCY_KEY_PROBLEM,
    IDEMPOTENCY_KEY_SHAPE,
    idempotency_key,
    request_fingerprint,
)
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import instant, pattern
from dispatcher.api.framework.routing import Routes, WithHeaders
from dispatcher.api.models import Body, NumberId, _json_object, _json_value, documented
from dispatcher.api.numbers import foreign_numbers, not_the_workspaces, own_number
from dispatcher.api.resources import StoredEnvelope, delivery
from dispatcher.domain.enums import DeliveryStatus, Scope
from dispatcher.domain.events import EVENT_TYPE_PATTERN, OPERATIONAL_TYPES, PUBLISHABLE_TYPES
from dispatcher.domain.resources import EventEnvelope
from dispatcher.domain.text import NO_NUL_PATTERN, is_control, no_control_pattern
from dispatcher.errors import FieldError, IdempotencyKeyReused, ValidationFailed
from dispatcher.store import deliveries, events, expunge
from dispatcher.store.events import NewEvent
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import DeliveryRow, EventRow
from dispatcher.store.workspaces import ApiKey


class Event(EventEnvelope):
    """An event of the workspace's stream: its envelope as stored (and sent), whether its
    content was expunged (then its `data` is null), and its ordering key (null when it has
    none), which is not part of the envelope."""

    expunged: bool
    orderingKey: str | None


# An event as the stream lists it: its stored envelope with `expunged` and `orderingKey`
# added, still never parsed (see `stored_event`).
StoredEvent = Annotated[orjson.Fragment, GetPydanticSchema(lambda _, handler: handler(Event))]


class PublishedEvents(TypedDict):
    """POST /v1/events/batch: each event's envelope, as POST /v1/events answers it, in the
    order of the request (stored, embedded as it is)."""

    data: list[StoredEnvelope]


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


def _ordering_key(value: str) -> str:
    if any(is_control(char) for char in value):
        raise ValueError("must not contain control characters")
    return value


# An event's ordering lane (docs/webhooks.md, "Ordered delivery"): any text, no controls.
OrderingKey = Annotated[
    str,
    Field(min_length=1, max_length=200),
    AfterValidator(_ordering_key),
    documented(no_control_pattern),
]


def _idempotency_key(value: str) -> str:
    if not IDEMPOTENCY_KEY_SHAPE.fullmatch(value):
        raise ValueError(IDEMPOTENCY_KEY_PROBLEM)
    return value


# An event's data: a JSON object whose `id` is a non-empty string (`PublishEvent._has_id`).
EventData = Annotated[
    dict[str, Any],
    AfterValidator(_json_value),
    _json_object(
        required=["id"],
        properties={"id": {"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN}},
    ),
]


class PublishEvent(Body):
    type: Annotated[str, documented(enum=sorted(PUBLISHABLE_TYPES))] = Field(
        min_length=1, max_length=100
    )
    numberId: NumberId | None = None
    data: EventData
    orderingKey: OrderingKey | None = None

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in OPERATIONAL_TYPES:
            raise ValueError(f"{value} is published by the service itself (see docs/events.md)")
        if value not in PUBLISHABLE_TYPES:
            raise ValueError(f"unknown event type: {value} (see docs/events.md)")
        return value

    @field_validator("data")
    @classmethod
    def _has_id(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("id"), str) or not value["id"]:
            raise ValueError("must carry `id`, a non-empty string")
        return value


# How many events one POST /v1/events/batch takes.
MAX_BATCH_EVENTS = 100


class BatchEvent(PublishEvent):
    """One event of a batch: what POST /v1/events takes, and its own Idempotency-Key (the
    header's rules, for this event alone)."""

    idempotencyKey: (
        Annotated[
            str,
            AfterValidator(_idempotency_key),
            documented(f"^{IDEMPOTENCY_KEY_SHAPE.pattern}$"),
        ]
        | None
    ) = None


class PublishBatch(Body):
    events: list[BatchEvent] = Field(min_length=1, max_length=MAX_BATCH_EVENTS)


routes = Routes()
log = structlog.get_logger("dispatcher.api")


@routes.post(
    "/v1/events",
    Scope.EVENTS_WRITE,
    StoredEnvelope,
    status=202,
    body_parsed_by_handler=PublishEvent,
    headers=(IDEMPOTENCY_KEY,),
    errors=(422,),
)
async def publish_event(
    request: web.Request, svc: Services, key: ApiKey
) -> WithHeaders[orjson.Fragment]:
    """202 with the event envelope. With `Idempotency-Key`, the identical request within 24
    hours answers the first event (and `Idempotent-Replayed: true`) and creates nothing;
    another request under that key is 422 `idempotency_key_reused` and creates nothing."""
    key_sent = idempotency_key(request)
    raw = await read_object(request)
    body = validate(PublishEvent, raw, "body")
    if body.numberId is not None:
        await own_number(svc, key.workspace_id, "body.numberId", body.numberId)
    payload, created = await events.publish(
        svc.db,
        workspace_id=key.workspace_id,
        event_type=body.type,
        number_id=body.numberId,
        data=body.data,
        idempotency_key=key_sent,
        fingerprint=None if key_sent is None else request_fingerprint(svc.cursor_key, raw),
        now=svc.clock.now(),
        ordering_key=body.orderingKey,
    )
    headers = {} if created else {"Idempotent-Replayed": "true"}
    # The stored envelope, embedded as it is: never parsed and re-serialised.
    return WithHeaders(orjson.Fragment(payload), headers)


@routes.post(
    "/v1/events/batch",
    Scope.EVENTS_WRITE,
    PublishedEvents,
    status=202,
    body_parsed_by_handler=PublishBatch,
    errors=(422,),
)
async def publish_events(
    request: web.Request, svc: Services, key: ApiKey
) -> WithHeaders[PublishedEvents]:
    """1 to 100 events, each what POST /v1/events takes plus its own `idempotencyKey`, all or
    nothing: 202 with each event's envelope in the request's order, published in one
    transaction; any event refused (400 or 422 naming it, `body.events[i]...`) and nothing is
    stored. An event under a key used within 24 hours replays as POST /v1/events does: the
    first event when its object is the same, 422 `idempotency_key_reused` otherwise.
    `Idempotent-Replayed: true` when every event of the batch replayed."""
    raw = await read_object(request)
    body = validate(PublishBatch, raw, "body", brackets=True)
    problems = _repeated_keys(body)
    numbers = {event.numberId for event in body.events if event.numberId is not None}
    foreign = await foreign_numbers(svc, key.workspace_id, sorted(numbers)) if numbers else set()
    for item, event in enumerate(body.events):
        if event.numberId in foreign:
            path = f"body.events[{item}].numberId"
            problems.extend(not_the_workspaces(path, [event.numberId]).errors)
    if problems:
        problems.sort(key=lambda problem: _item(problem.path))
        raise ValidationFailed(problems)
    batch = [
        NewEvent(
            key.workspace_id,
            event.type,
            event.numberId,
            event.data,
            ordering_key=event.orderingKey,
            idempotency_key=event.idempotencyKey,
            # The event's object as a POST /v1/events body (its key is not part of it): the
            # same event replays under its key whichever door published it first.
            fingerprint=None
            if event.idempotencyKey is None
            else request_fingerprint(
                svc.cursor_key,
                {name: value for name, value in sent.items() if name != "idempotencyKey"},
            ),
        )
        for event, sent in zip(body.events, raw["events"], strict=True)
    ]
    try:
        published = await events.publish_batch(
            svc.db, workspace_id=key.workspace_id, events=batch, now=svc.clock.now()
        )
    except IdempotencyKeyReused as exc:
        if exc.item is None:
            raise
        path = f"body.events[{exc.item}].idempotencyKey"
        raise ApiError(
            422,
            "idempotency_key_reused",
            f"{path}: {exc.message}",
            [{"path": path, "message": exc.message}],
        ) from exc
    headers = {} if any(created for _, created in published) else {"Idempotent-Replayed": "true"}
    # The stored envelopes, embedded as they are: never parsed and re-serialised.
    answer: PublishedEvents = {"data": [orjson.Fragment(payload) for payload, _ in published]}
    return WithHeaders(answer, headers)


def _repeated_keys(body: PublishBatch) -> list[FieldError]:
    """An error for each event whose `idempotencyKey` an earlier event of the batch has."""
    first: dict[str, int] = {}
    problems = []
    for item, event in enumerate(body.events):
        if event.idempotencyKey is None:
            continue
        earlier = first.setdefault(event.idempotencyKey, item)
        if earlier != item:
            problems.append(
                FieldError(
                    f"body.events[{item}].idempotencyKey",
                    f"repeats the idempotencyKey of body.events[{earlier}]",
                )
            )
    return problems


def _item(path: str) -> int:
    """The event's place in `body.events[i]...`."""
    return int(path.removeprefix("body.events[").partition("]")[0])


SUMMARIES = 100  # deliveries shown with an event; its deliveries list pages through all


class EventQuery(PageQuery):
    # Event types as the outbox function takes them (`contact.updated`, `order.paid_late`):
    # the stream may hold types beyond the catalog, so the filter is a pattern, not a closed
    # list.
    type: Annotated[
        str | None, pattern(EVENT_TYPE_PATTERN, "must be an event type, like contact.updated")
    ] = None
    since: Annotated[str | None, instant("events created at or after this time (inclusive)")] = None
    until: Annotated[str | None, instant("events created before this time (exclusive)")] = None


@routes.list("/v1/events", Scope.EVENTS_READ, stored_event, cursor="events")
async def list_events(at: Listing, query: EventQuery) -> StorePage[EventRow]:
    """The workspace's events, newest first (test events are not part of the stream)."""
    return await events.list_page(
        at.db, at.workspace_id, event_type=query.type, **query.time_range(), **at.page
    )


async def _event(svc: Services, workspace_id: str, event_id: str) -> EventRow:
    return found(await events.get(svc.db, workspace_id, event_id), "event")


async def _with_deliveries(svc: Services, key: ApiKey, row: EventRow) -> EventWithDeliveries:
    """The event with how many deliveries it has and the first 100."""
    first = await deliveries.list_for_event(
        svc.db, key.workspace_id, row.id, row.created_at, limit=SUMMARIES, after=None
    )
    # Fewer than a page: the page is the count; a count statement only when there are more.
    count = len(first.rows)
    if first.last is not None:
        count = await deliveries.count_for_event(svc.db, key.workspace_id, row.id, row.created_at)
    return event_with_deliveries(row, first.rows, count)


@routes.get("/v1/events/{event_id}", Scope.EVENTS_READ, EventWithDeliveries)
async def get_event(request: web.Request, svc: Services, key: ApiKey) -> EventWithDeliveries:
    """The event as published (`data` null once expunged), with how many deliveries it has and
    the first 100."""
    row = await _event(svc, key.workspace_id, request.match_info["event_id"])
    return await _with_deliveries(svc, key, row)


@routes.post("/v1/events/{event_id}/expunge", Scope.EVENTS_WRITE, EventWithDeliveries)
async def expunge_event(request: web.Request, svc: Services, key: ApiKey) -> EventWithDeliveries:
    """Erase the event's content: its `data` (null from now on, in the event and in its
    deliveries' `payload`) and every response excerpt its deliveries' attempts kept. Its
    pending deliveries are given up (`lastError` `expunged`); one in flight ends with its
    attempt, keeping no excerpt and scheduling no retry. None of its deliveries can be
    retried (409), and a recover skips them. Answers the event as `GET` does, `expunged`
    true; again, the same."""
    erased = await expunge.event(
        svc.db, key.workspace_id, request.match_info["event_id"], svc.clock.now()
    )
    row = found(erased, "event")
    log.info("event.expunged", workspace_id=key.workspace_id, event_id=row.id)
    return await _with_deliveries(svc, key, row)


@routes.list(
    "/v1/events/{event_id}/deliveries", Scope.EVENTS_READ, delivery, cursor="event-deliveries"
)
async def list_event_deliveries(at: Listing, query: PageQuery) -> StorePage[DeliveryRow]:
    """Every delivery of the event, newest first, one per subscription it went to."""
    row = await _event(at.svc, at.workspace_id, at.path["event_id"])
    return await deliveries.list_for_event(
        at.db, at.workspace_id, row.id, row.created_at, **at.page
    )

"""Events: publishing them directly (the API door of the three), reading the stream, and
expunging an event's content."""

from __future__ import annotations

from typing import Annotated

import orjson
import structlog
from aiohttp import web

from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.http import ApiError, read_object, validate
from dispatcher.api.framework.idempotency import (
    IDEMPOTENCY_KEY,
    idempotency_key,
    request_fingerprint,
)
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import instant, pattern
from dispatcher.api.framework.routing import Routes, WithHeaders
from dispatcher.api.models import PublishBatch, PublishEvent
from dispatcher.api.numbers import foreign_numbers, not_the_workspaces, own_number
from dispatcher.api.resources import (
    EventWithDeliveries,
    PublishedEvents,
    StoredEnvelope,
    delivery,
    event_with_deliveries,
    stored_event,
)
from dispatcher.domain.enums import Scope
from dispatcher.domain.events import EVENT_TYPE_PATTERN
from dispatcher.errors import FieldError, IdempotencyKeyReused, ValidationFailed
from dispatcher.store import deliveries, events, expunge
from dispatcher.store.events import NewEvent
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import DeliveryRow, EventRow
from dispatcher.store.workspaces import ApiKey

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

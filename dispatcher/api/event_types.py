"""The event catalog: `GET /v1/event-types` and `GET /v1/event-types/{event_type}` (docs/events.md,
"Catalog"). What each type means, the JSON Schema (2020-12) of its `data` and an example,
from the domain's catalog (domain/catalog.py): the schema is pydantic's of the very type the
event's builder is held to, and the example is made by that builder. The OpenAPI document
lists the same types under its `webhooks` (api/registry.py)."""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework.context import ANY_KEY, Services
from dispatcher.api.framework.found import found
from dispatcher.api.framework.openapi import json_schema
from dispatcher.api.framework.routing import Routes
from dispatcher.api.framework.shapes import Page
from dispatcher.domain.catalog import BY_NAME, CATALOG, EventTypeEntry
from dispatcher.store.workspaces import ApiKey


class EventType(TypedDict):
    """An event type the service delivers: its `name` (the envelope's `type`), what it means,
    the JSON Schema (2020-12) of the envelope's `data` for it, and an example of that data."""

    name: str
    description: str
    schema: dict[str, Any]
    example: dict[str, Any]


def event_type(entry: EventTypeEntry) -> EventType:
    return {
        "name": entry.name,
        "description": entry.description,
        "schema": json_schema(entry.data),
        "example": dict(entry.example),
    }


@functools.cache
def catalog() -> Page[EventType]:
    """The whole catalog, one page (`nextCursor` null), built once."""
    return {"data": [event_type(entry) for entry in CATALOG], "nextCursor": None}


routes = Routes()


@routes.get("/v1/event-types", ANY_KEY, Page[EventType])
async def list_event_types(request: web.Request, svc: Services, key: ApiKey) -> Page[EventType]:
    """Every event type a delivery can carry, in one page (`nextCursor` is null): its name,
    description, the JSON Schema (2020-12) of its `data`, and an example. Any valid key may
    ask, whatever its scopes."""
    return catalog()


@routes.get("/v1/event-types/{event_type}", ANY_KEY, EventType)
async def get_event_type(request: web.Request, svc: Services, key: ApiKey) -> EventType:
    """One event type of the catalog, by name (404 for a type the catalog does not list)."""
    entry = found(BY_NAME.get(request.match_info["event_type"]), "event type")
    return next(item for item in catalog()["data"] if item["name"] == entry.name)

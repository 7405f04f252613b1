"""The route registry: every route table of the API, in the order the app adds them, and the
OpenAPI document of them all (`GET /v1/openapi.json`).

The app (api/app.py) adds these tables; the strict-input middleware holds requests to their
declarations (`route_inputs`); the document (api/framework/openapi.py) describes them.
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from dispatcher.api import (
    admin,
    attempts,
    conversations,
    event_types,
    events,
    health,
    inbound,
    me,
    messages,
    metrics,
    poll,
    portal,
    stats,
    webhooks,
)
from dispatcher.api.framework import openapi as generated
from dispatcher.api.framework.context import PUBLIC
from dispatcher.api.framework.http import json_response
from dispatcher.api.framework.query import RouteInputs
from dispatcher.api.framework.routing import Routes, declared_routes
from dispatcher.domain.catalog import CATALOG

routes = Routes()

# Every route table of the API, in the order the app adds them. /metrics is documented even
# when DISPATCHER_METRICS_PORT moves it to a port of its own.
ROUTE_TABLES: tuple[Routes, ...] = (
    health.routes,
    routes,
    me.routes,
    messages.routes,
    conversations.routes,
    inbound.routes,
    webhooks.routes,
    poll.routes,
    attempts.routes,
    stats.routes,
    events.routes,
    event_types.routes,
    metrics.routes,
    portal.routes,
    admin.routes,
)


def document() -> dict[str, Any]:
    """The OpenAPI document of every route of the API, and of every event type a delivery can
    carry (its `webhooks`: domain/catalog.py)."""
    events = [
        generated.EventDoc(entry.name, entry.description, entry.data, entry.example)
        for entry in CATALOG
    ]
    return generated.document(declared_routes(*ROUTE_TABLES), events)


def route_inputs() -> dict[tuple[str, str], RouteInputs]:
    """(METHOD, path template) -> the query parameters, body and key the route declares."""
    return {(route.method, route.path): route.inputs for route in declared_routes(*ROUTE_TABLES)}


@routes.get("/v1/openapi.json", PUBLIC)
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=document_bytes(), content_type="application/json")


@functools.cache
def document_bytes() -> bytes:
    """The document, built once, at its first request (after every route is declared; its
    character classes take a few tenths of a second to spell out: domain/text.py)."""
    return json_response(document()).body  # type: ignore[return-value]

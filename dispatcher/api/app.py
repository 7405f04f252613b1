"""create_app: the aiohttp application with every route and the error middleware."""

from __future__ import annotations

from aiohttp import web

from dispatcher.api import (
    conversations,
    events,
    health,
    inbound,
    messages,
    metrics,
    openapi,
    webhooks,
)
from dispatcher.api.context import SERVICES, Services
from dispatcher.api.http import MAX_BODY_BYTES, errors_middleware


def create_app(services: Services) -> web.Application:
    # The body limit is enforced by read_json (413 in our error shape); aiohttp's own limit is
    # set a little higher so that it never answers first with its own format.
    app = web.Application(middlewares=[errors_middleware], client_max_size=MAX_BODY_BYTES + 1024)
    app[SERVICES] = services
    for module in (health, metrics, openapi, messages, conversations, inbound, webhooks, events):
        app.router.add_routes(module.routes)
    return app

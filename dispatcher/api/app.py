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
from dispatcher.api.http import MAX_BODY_BYTES, errors_middleware, shape_parser_errors
from dispatcher.api.query import declared_inputs


def create_app(services: Services) -> web.Application:
    # Inside the error middleware, queries and bodies are held to the routes' declarations.
    inputs = declared_inputs(openapi.route_inputs())
    # The body limit is enforced by read_json (413 in our error shape); aiohttp's own limit is
    # set a little higher so that it never answers first with its own format.
    app = web.Application(
        middlewares=[errors_middleware, inputs], client_max_size=MAX_BODY_BYTES + 1024
    )
    app[SERVICES] = services
    # What aiohttp's HTTP parser refuses (below every middleware) gets the error shape too.
    shape_parser_errors(app)
    for module in (health, openapi, messages, conversations, inbound, webhooks, events):
        app.router.add_routes(module.routes)
    # /metrics has no key. With DISPATCHER_METRICS_PORT set it is served there only (a port
    # that can stay private); without it, here, for anyone who can reach the API port.
    if services.settings.metrics_port is None:
        app.router.add_routes(metrics.routes)
    return app

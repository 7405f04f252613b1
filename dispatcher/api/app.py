"""create_app: the aiohttp application with every route and the error middleware."""

from __future__ import annotations

from aiohttp import web

from dispatcher import tracing
from dispatcher.api import admin, console, demo, metrics, portal, registry
from dispatcher.api.framework.admission import ADMISSION, Admission, admission_middleware
from dispatcher.api.framework.connections import ConnectionLimits, guard_connections
from dispatcher.api.framework.context import SERVICES, Services
from dispatcher.api.framework.http import (
    MAX_BODY_BYTES,
    declare_request_series,
    errors_middleware,
    tracing_middleware,
)
from dispatcher.api.framework.query import declared_inputs


def create_app(
    services: Services, demo_receiver: demo.DemoReceiver | None = None
) -> web.Application:
    """The API for `services`; with `demo_receiver`, the demo receiver's routes too (api/demo.py:
    `serve` passes one while the demo workspace exists)."""
    # Inside the error middleware, queries and bodies are held to the routes' declarations.
    inputs = declared_inputs(registry.route_inputs())
    # The body limit is enforced by read_json (413 in our error shape); aiohttp's own limit is
    # set a little higher so that it never answers first with its own format.
    # Request spans only while tracing is on: off, requests pay nothing for it.
    traced = [tracing_middleware] if tracing.ENABLED else []
    # Backpressure (api/framework/admission.py): inside the error middleware, before
    # anything reads the body; with the pool's bounded wait (store/database.py), what bounds
    # the work in progress.
    settings = services.settings
    admission = Admission(settings.max_requests_in_progress, settings.admission_timeout)
    app = web.Application(
        middlewares=[*traced, errors_middleware, admission_middleware(admission), inputs],
        client_max_size=MAX_BODY_BYTES + 1024,
    )
    app[SERVICES] = services
    app[ADMISSION] = admission
    # Slow clients are held to time bounds, connections to a count; what aiohttp's HTTP parser
    # refuses (below every middleware) gets the error shape too (api/framework/connections.py).
    guard_connections(app, ConnectionLimits.of(settings))
    for table in registry.ROUTE_TABLES:
        # /metrics has no key. With DISPATCHER_METRICS_PORT set it is served there only (a port
        # that can stay private); without it, here, for anyone who can reach the API port.
        if table is metrics.routes and services.settings.metrics_port is not None:
            continue
        # The admin API exists only while DISPATCHER_ADMIN_TOKEN is set: without it, every
        # admin route is an unknown route (404), whatever is sent to it.
        if table is admin.routes and services.settings.admin_token is None:
            continue
        app.router.add_routes(table)
        for route in table.declared:
            # Each route's success series exists at 0 from the first scrape (metrics.py).
            declare_request_series(route.path, route.method, route.operation.status)
    if demo_receiver is not None:
        app[demo.DEMO_RECEIVER] = demo_receiver
        app.router.add_routes(demo.routes)
    # The web console: static files, not part of the API's document (api/console/).
    # A portal session's page first: `/console/PS…` is no file of the console's (api/portal.py).
    app.router.add_routes(portal.page_routes)
    app.router.add_routes(console.routes)
    return app

"""Probes for orchestrators: no auth, cheap."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from dispatcher.api import metrics
from dispatcher.api.framework.connections import ConnectionLimits, guard_connections
from dispatcher.api.framework.context import PUBLIC, services
from dispatcher.api.framework.http import Handler, errors_middleware, json_response
from dispatcher.api.framework.routing import Routes
from dispatcher.errors import DatabaseUnavailable
from dispatcher.store import schema

routes = Routes()

ReadinessCheck = web.AppKey("readiness_checks", list[tuple[str, Callable[[], bool]]])


@routes.get("/healthz", PUBLIC)
async def healthz(request: web.Request) -> web.Response:
    """The process is alive and serving."""
    return json_response({"status": "ok"})


@routes.get("/readyz", PUBLIC, also={503: "not ready"})
async def readyz(request: web.Request) -> web.Response:
    """Ready for traffic: the database answers with the expected schema, the engine runs.
    The same definition as the `dispatcher_ready` gauge (monitor.py): the database's checks
    (store/schema.py, `database_checks`; overloaded is ready) and the process's own."""
    checks = await schema.database_checks(services(request).db)
    for name, probe in request.app.get(ReadinessCheck, []):
        checks[name] = probe()
    ready = all(checks.values())
    return json_response({"status": "ok" if ready else "unavailable", "checks": checks},
                         status=200 if ready else 503)  # fmt: skip


def starting_app(
    *, engine: bool, serve_metrics: bool, limits: ConnectionLimits | None = None
) -> web.Application:
    """What the API port answers while the process waits for its database at start-up.

    Alive (`/healthz` 200) but not ready (`/readyz` 503, every check false), and every other
    route 503 `unavailable` with `Retry-After`: the answer the API gives during an outage, so
    clients need no second rule. Every answer closes its connection, so that no client keeps
    one open to this app when the full API takes over the port.
    """

    @web.middleware
    async def close_connections(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        response.force_close()
        return response

    async def not_ready(request: web.Request) -> web.Response:
        checks = {"database": False, "schema": False}
        if engine:
            checks["engine"] = False
        return json_response({"status": "unavailable", "checks": checks}, status=503)

    async def not_here(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    async def unavailable(request: web.Request) -> web.Response:
        raise DatabaseUnavailable("database unavailable: not connected yet (starting)")

    app = web.Application(middlewares=[close_connections, errors_middleware])
    guard_connections(app, limits or ConnectionLimits())
    app.router.add_routes(route for route in routes if route.path == "/healthz")
    app.router.add_get("/readyz", not_ready)
    if serve_metrics:
        app.router.add_routes(metrics.routes)
    else:
        app.router.add_get("/metrics", not_here)
    app.router.add_route("*", "/{tail:.*}", unavailable)
    return app

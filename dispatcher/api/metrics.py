"""`GET /metrics` for Prometheus (no auth, like the health probes)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from dispatcher.api.context import PUBLIC
from dispatcher.api.routing import Routes

routes = Routes()


@routes.get("/metrics", PUBLIC)
async def metrics(request: web.Request) -> web.Response:
    response = web.Response(body=generate_latest(REGISTRY))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def metrics_only_app() -> web.Application:
    """The app served on DISPATCHER_METRICS_PORT: /metrics and nothing else."""
    app = web.Application()
    app.router.add_routes(routes)
    return app

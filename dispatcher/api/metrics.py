"""`GET /metrics` for Prometheus (no auth, like the health probes).

The exposition is rendered in a worker thread: its cost grows with the series (the opt-in
per-webhook ones above all), and the event loop keeps serving the API and the engine
meanwhile. The collectors are thread-safe (prometheus_client locks each value), and the
gauges computed at scrape time read the engine's state without iterating it in place.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from dispatcher.api.framework.context import PUBLIC
from dispatcher.api.framework.routing import Routes

routes = Routes()


@routes.get("/metrics", PUBLIC)
async def metrics(request: web.Request) -> web.Response:
    body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, REGISTRY)
    response = web.Response(body=body)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def metrics_only_app() -> web.Application:
    """The app served on DISPATCHER_METRICS_PORT: /metrics and nothing else."""
    app = web.Application()
    app.router.add_routes(routes)
    return app

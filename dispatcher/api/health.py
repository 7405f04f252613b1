"""Probes for orchestrators: no auth, cheap."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from dispatcher.api.context import services
from dispatcher.api.http import json_response
from dispatcher.store import schema

routes = web.RouteTableDef()

ReadinessCheck = web.AppKey("readiness_checks", list[tuple[str, Callable[[], bool]]])


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """The process is alive and serving."""
    return json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Ready for traffic: the database answers with the expected schema, the engine runs."""
    checks: dict[str, bool] = {}
    try:
        version = await schema.current_version(services(request).db)
        checks["database"] = True
        checks["schema"] = version == schema.SCHEMA_VERSION
    except Exception:
        checks["database"] = False
        checks["schema"] = False
    for name, probe in request.app.get(ReadinessCheck, []):
        checks[name] = probe()
    ready = all(checks.values())
    return json_response({"status": "ok" if ready else "unavailable", "checks": checks},
                         status=200 if ready else 503)  # fmt: skip

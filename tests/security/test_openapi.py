"""The OpenAPI document matches the app, and schemathesis finds no 5xx and no response that
breaks the document (run against the real service, as a process)."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.api import console
from dispatcher.api.app import create_app
from dispatcher.api.context import Services
from dispatcher.api.openapi import document
from tests.conftest import wait_for
from tests.e2e.test_process import free_port, read_until, start, stop

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def test_every_route_is_documented_and_every_documented_route_exists(services: Services) -> None:
    """Every route of the API; the console's static files (api/console/) are not the API."""
    app = create_app(services)
    console_paths = {d.path for d in console.routes if isinstance(d, web.RouteDef)}
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
        and route.resource is not None
        and route.resource.canonical not in console_paths
    }
    documented = {(m, p) for p, ops in document()["paths"].items() for m in ops}
    assert served == documented


async def test_document_is_served(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/v1/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["openapi"] == "3.1.0"
    assert "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry" in doc["paths"]
    assert doc["components"]["schemas"]["CreateWebhook"]["additionalProperties"] is False


async def test_schemathesis_finds_no_server_error(database_url: str) -> None:
    assert SCHEMATHESIS.exists() or shutil.which("schemathesis"), "schemathesis not installed"
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ENGINE="off",
                       DISPATCHER_LOG_LEVEL="warning")  # fmt: skip
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        base = f"http://127.0.0.1:{port}"

        async def up() -> bool:
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(up, within=30)
        runner = await asyncio.create_subprocess_exec(
            str(SCHEMATHESIS), "run", f"{base}/v1/openapi.json",
            "-H", f"Authorization: Bearer {key}",
            "--max-examples", "20", "--seed", "20261121",
            "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out_bytes, _ = await asyncio.wait_for(runner.communicate(), timeout=300)
        out = out_bytes.decode()
    finally:
        code, err = await stop(proc)
    summary = re.search(r"(\d+) generated, (\d+) passed", out)
    assert runner.returncode == 0 and summary is not None, out[-4000:]
    print(f"\nschemathesis: {summary.group(0)}")
    assert int(summary.group(1)) == int(summary.group(2)) > 500
    assert code == 0, err
    assert "Traceback" not in err, err

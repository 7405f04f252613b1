"""The OpenAPI document matches the app, and schemathesis finds no 5xx, no response that
breaks the document, and no schema-valid request the server refuses (run against the real
service, as a process): the document is exactly as strict as the server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.api import console
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.api.registry import document
from dispatcher.domain import headers, text, urls
from tests.conftest import wait_for
from tests.processes import free_port, read_until, start, stop

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
ROOT = Path(__file__).resolve().parents[2]


def _request_schemas() -> dict[str, Any]:
    """The components the request bodies use (validation mode)."""
    doc = document()
    bodies = {
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for ops in doc["paths"].values()
        for op in ops.values()
        if "requestBody" in op
    }
    schemas: dict[str, Any] = doc["components"]["schemas"]
    return {name: schemas[name] for name in (*bodies, "BatchEvent", "Media")}


def _walk(value: Any) -> Any:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_every_schema_has_a_title_of_its_own() -> None:
    """Generators name classes by title: nine schemas titled `Page` became one."""
    schemas = document()["components"]["schemas"]
    assert {name: schema["title"] for name, schema in schemas.items()} == {
        name: name for name in schemas
    }
    assert {"EventPage", "WebhookPage", "MessagePage"} <= set(schemas)


def test_no_request_field_defaults_to_null() -> None:
    """A client that fills in `default: null` sends null where it meant to leave a field out."""
    for name, schema in _request_schemas().items():
        for node in _walk(schema):
            assert not (isinstance(node, dict) and "default" in node and node["default"] is None), (
                name
            )


def test_patch_fields_are_nullable_only_where_the_server_takes_null() -> None:
    properties = document()["components"]["schemas"]["UpdateWebhook"]["properties"]
    nullable = {
        name for name, field in properties.items() if {"type": "null"} in field.get("anyOf", [])
    }
    assert nullable == {
        "name", "numberIds", "maxConcurrency", "rateLimit", "ordering", "headers",
        "secretHeaders", "filter", "timeoutSeconds", "retrySchedule", "tls", "auth",
    }  # fmt: skip
    assert properties["url"]["type"] == "string"
    assert properties["enabled"] == {"type": "boolean"}


async def test_null_is_refused_where_the_document_says_not_nullable(
    client: TestClient[Any, Any], ws: Any
) -> None:
    hook = await client.post(
        "/v1/webhooks",
        json={"url": "https://example.com/h", "events": ["message.received"]},
        headers=ws.headers,
    )
    hook_id = (await hook.json())["id"]
    for field in ("url", "events", "enabled"):
        resp = await client.patch(f"/v1/webhooks/{hook_id}", json={field: None}, headers=ws.headers)
        assert resp.status == 400
        assert (await resp.json())["errors"] == [
            {"path": f"body.{field}", "message": "must not be null"}
        ]


def test_every_pattern_is_an_ecma_262_regular_expression() -> None:
    """JSON Schema's patterns are ECMA-262 (with the `u` flag); Python's `re` reads more."""
    node = shutil.which("node")
    if node is None:
        import pytest

        pytest.skip("node is not installed")
    patterns = sorted(
        {n["pattern"] for n in _walk(document()) if isinstance(n, dict) and "pattern" in n}
    )
    script = (
        "const bad = JSON.parse(require('fs').readFileSync(0, 'utf8')).filter(p => {"
        " try { new RegExp(p, 'u'); return false } catch (e) { return true } });"
        " console.log(JSON.stringify(bad))"
    )
    out = subprocess.run(
        [node, "-e", script], input=json.dumps(patterns), capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    assert json.loads(out.stdout) == []


def test_the_documented_patterns_agree_with_the_validators() -> None:
    """Each pattern, held against the predicate it is spelled from, on the edge cases."""
    visible = re.compile(text.visible_text_pattern())
    for value in ["a", " a ", "\u200b", " ", "\u3164", "a\x00", "\U000e0001", "😀", ""]:
        assert bool(visible.fullmatch(value)) == (not text.is_blank(value) and "\x00" not in value)
    url = re.compile(urls.url_pattern(text.unprintable_class()))
    for value in [
        "https://example.com/h", "http://192.0.2.10:8080/x?y#z", "http://[2001:db8::1]/",
        "http://127.1/", "http://foo.123/", "http://0x7f/", "http://host:0/", "http://a..b/",
        "http://-a.example/", "http://user@host/", "http://h/\u200b", "ftp://h/",
        "http://h:65536/", "http://xn--a/", "http://[fe80::1%25eth0]/", "http://h/a\\b",
    ]:  # fmt: skip
        if url.fullmatch(value):
            assert urls.check_webhook_url(value) == value, value
    name = re.compile(headers.NAME_PATTERN)
    for value in ["X-A", "webhook-x", "Content-Type", "X A", "X:A", "Host", "X-Host"]:
        assert bool(name.fullmatch(value)) == (headers.name_problem(value) is None), value


def test_every_route_is_documented_and_every_documented_route_exists(services: Services) -> None:
    """Every route of the API; the console's static files (api/console/) and its page for a
    portal link (`/console/PS…`) are not the API."""
    app = create_app(services)
    console_paths = {d.path for d in console.routes if isinstance(d, web.RouteDef)}
    console_paths.add(f"{console.PREFIX}/{{portal_session_id}}")  # portal.page_routes
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
        # The coverage phase is left out: it spends minutes building strings of the URL
        # pattern at its maximum length. The hooks drop only the refusals no schema can state.
        runner = await asyncio.create_subprocess_exec(
            str(SCHEMATHESIS), "run", f"{base}/v1/openapi.json",
            "-H", f"Authorization: Bearer {key}",
            "--max-examples", "20", "--seed", "20261121",
            "--phases", "examples,fuzzing,stateful",
            "--checks", "not_a_server_error,response_schema_conformance,"
            "content_type_conformance,positive_data_acceptance",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT),
                 "SCHEMATHESIS_HOOKS": "tests.security.schemathesis_hooks"},
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

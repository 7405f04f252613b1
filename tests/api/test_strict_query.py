"""Query strings are held to the routes' declarations, like bodies: ASCII digits only for
integers, no repeated parameter, no unknown parameter; on every endpoint."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api.registry import document
from tests.conftest import Workspace

PAGED = ["/v1/messages", "/v1/conversations", "/v1/webhooks", "/v1/webhooks/{hook}/deliveries"]


async def hook_id(client: TestClient[Any, Any], ws: Workspace) -> str:
    resp = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["call.missed"]},
        headers=ws.headers,
    )
    return str((await resp.json())["id"])


def query_error(body: Any, name: str) -> dict[str, str]:
    assert body["status"] == 400 and body["code"] == "validation_error", body
    (error,) = body["errors"]
    assert error["path"] == f"query.{name}", body
    return dict(error)


NOT_A_LIMIT = [
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\uff15",  # FULLWIDTH DIGIT FIVE
    "1\uff10",  # 1 and a full-width 0
    "\u0b6b",  # ORIYA DIGIT FIVE
    "\u00b2",  # SUPERSCRIPT TWO
    "+5",
    "-5",
    " 5",
    "5 ",
    "5\n",
    "5.0",
    "1e1",
    "0x5",
    "",
    "0",
    "101",
    "99999999999999999999999999",
]


@pytest.mark.parametrize("path", PAGED)
async def test_limit_takes_ascii_digits_only(
    client: TestClient[Any, Any], ws: Workspace, path: str
) -> None:
    url = path.format(hook=await hook_id(client, ws))
    for limit in NOT_A_LIMIT:
        resp = await client.get(url, params={"limit": limit}, headers=ws.headers)
        assert resp.status == 400, (limit, await resp.text())
        error = query_error(await resp.json(), "limit")
        assert "1 to 100" in error["message"]
    for limit in ("1", "05", "100"):
        resp = await client.get(url, params={"limit": limit}, headers=ws.headers)
        assert resp.status == 200, (limit, await resp.text())


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ([("limit", "5"), ("limit", "7")], "limit"),
        ([("limit", "5"), ("limit", "5")], "limit"),
        ([("cursor", "a"), ("cursor", "b")], "cursor"),
        ([("limit", "5"), ("cursor", "x"), ("limit", "5")], "limit"),
    ],
)
async def test_a_repeated_parameter_is_400(
    client: TestClient[Any, Any], ws: Workspace, query: list[tuple[str, str]], name: str
) -> None:
    hook = await hook_id(client, ws)
    for path in PAGED:
        resp = await client.get(path.format(hook=hook), params=query, headers=ws.headers)
        assert resp.status == 400, (path, query, await resp.text())
        error = query_error(await resp.json(), name)
        assert "repeat" in error["message"]
    # A request that matches no route is answered as before: 404, or 405 with Allow.
    missing = await client.get("/v1/nothing", params=query, headers=ws.headers)
    assert missing.status == 404
    assert (await missing.json())["code"] == "not_found"
    wrong = await client.delete("/v1/messages", params=query, headers=ws.headers)
    assert wrong.status == 405
    assert (await wrong.json())["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        ("/v1/messages", [("direction", "incoming"), ("direction", "outgoing")], "direction"),
        ("/v1/messages", [("contact", "+15555550123"), ("contact", "+15555550124")], "contact"),
        ("/v1/messages", [("numberId", "PN" + "0" * 32)] * 2, "numberId"),
        ("/v1/conversations", [("status", "open"), ("status", "done")], "status"),
        ("/v1/conversations", [("status", "open"), ("status", "open")], "status"),
        ("/v1/webhooks/{hook}/deliveries", [("event", "call.missed")] * 2, "event"),
        ("/v1/webhooks/{hook}/deliveries", [("status", "failed"), ("status", "x")], "status"),
    ],
)
async def test_a_repeated_filter_is_400(
    client: TestClient[Any, Any],
    ws: Workspace,
    path: str,
    query: list[tuple[str, str]],
    name: str,
) -> None:
    url = path.format(hook=await hook_id(client, ws))
    resp = await client.get(url, params=query, headers=ws.headers)
    assert resp.status == 400, await resp.text()
    query_error(await resp.json(), name)
    # Once, it is the filter it always was.
    once = await client.get(url, params=query[:1], headers=ws.headers)
    assert once.status == 200, await once.text()


def concrete(path: str, hook: str) -> str:
    """A real path for a documented template (ids that exist or not: the check comes first)."""
    return re.sub(r"\{(\w+)\}", lambda m: hook if m[1] == "webhook_id" else "XX" + "0" * 32, path)


@pytest.mark.parametrize(
    ("method", "path"),
    [(method, path) for path, ops in document()["paths"].items() for method in ops],
)
async def test_every_endpoint_refuses_an_unknown_parameter(
    client: TestClient[Any, Any], ws: Workspace, method: str, path: str
) -> None:
    hook = await hook_id(client, ws)
    url = concrete(path, hook)
    for name in ("colour", "Limit", "limit[]", "numberid"):
        resp = await client.request(method.upper(), url, params={name: "1"}, headers=ws.headers)
        assert resp.status == 400, (method, path, name, await resp.text())
        body = await resp.json()
        error = query_error(body, name)
        assert "unknown" in error["message"]
        assert name in body["message"]


def test_every_operation_documents_400_and_its_other_refusals() -> None:
    paths = document()["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert "400" in operation["responses"], (method, path)
    assert "422" in paths["/v1/events"]["post"]["responses"]
    for path in ("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry",
                 "/v1/webhooks/{webhook_id}/recover"):  # fmt: skip
        assert "409" in paths[path]["post"]["responses"]


def test_documented_patterns_are_ascii_only() -> None:
    listing = document()["paths"]["/v1/messages"]["get"]["parameters"]
    (contact,) = [p for p in listing if p["name"] == "contact"]
    pattern = re.compile(contact["schema"]["pattern"])
    assert pattern.search("+15555550123")
    for bad in ("+1555555012\u0663", "+\uff11555555012", "+\u0661\u0665\u0665\u0665"):
        assert not pattern.search(bad), bad

"""Portal sessions (docs/console.md, "Portal sessions"; docs/admin.md): made by the admin API or
by a workspace key with `webhooks:write`; the link's secret is exchanged once for a credential
that holds the capabilities' scopes only, in its own workspace only, never the admin API; it
stops at `expiresAt` (the services' clock) and at a delete; the secret never reaches a log.
Validation is a 400 naming the field."""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.console import CONTENT_SECURITY_POLICY
from dispatcher.api.framework.context import Services
from dispatcher.api.registry import document
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from tests.clock import FakeClock
from tests.conftest import ADMIN_HEADERS, LOGGED, MakeWorkspace, Workspace

Client = TestClient[Any, Any]
HOOK = {"url": "http://127.0.0.1:9/hook", "events": ["message.delivered"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def create(client: Client, ws: Workspace, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/portal-sessions", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    made: dict[str, Any] = await resp.json()
    return made


def secret_of(made: dict[str, Any]) -> str:
    fragment = str(urlsplit(made["url"]).fragment)
    assert fragment.startswith("portal=")
    return fragment.removeprefix("portal=")


async def exchange(client: Client, made: dict[str, Any], status: int = 200) -> dict[str, Any]:
    resp = await client.post("/v1/portal-sessions/exchange", json={"secret": secret_of(made)})
    assert resp.status == status, await resp.text()
    found: dict[str, Any] = await resp.json()
    return found


async def session_token(client: Client, ws: Workspace, capabilities: str, **body: Any) -> str:
    made = await create(client, ws, capabilities=capabilities, **body)
    token: str = (await exchange(client, made))["token"]
    return token


async def test_a_key_makes_a_session_whose_link_opens_the_console(
    client: Client, ws: Workspace, clock: FakeClock
) -> None:
    made = await create(client, ws, capabilities="read")
    assert set(made) == {"id", "url", "expiresAt"}
    assert re.fullmatch(r"PS[0-9a-f]{32}", made["id"])
    url = urlsplit(made["url"])
    # The secret in the fragment only; the session's id (no secret) in the path, no query.
    assert url.path == f"/console/{made['id']}" and url.query == ""
    assert (url.scheme, url.netloc) == ("http", f"127.0.0.1:{client.port}")
    assert secret_of(made).startswith("dpl_")
    # The default life: 900 s from the services' clock.
    expires = made["expiresAt"]
    assert expires.endswith("Z")
    page = await client.get(url.path)
    assert page.status == 200
    assert '<script type="module" src="app.js"></script>' in await page.text()
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["X-Frame-Options"] == "DENY"

    exchanged = await exchange(client, made)
    assert exchanged["sessionId"] == made["id"] and exchanged["workspaceId"] == ws.id
    assert exchanged["capabilities"] == "read"
    assert exchanged["scopes"] == ["webhooks:read", "events:read"]
    assert exchanged["expiresAt"] == expires and exchanged["token"].startswith("dps_")
    me = await client.get("/v1/me", headers=bearer(exchanged["token"]))
    assert await me.json() == {
        "workspaceId": ws.id,
        "keyId": made["id"],
        "scopes": ["webhooks:read", "events:read"],
    }


async def test_the_admin_makes_a_session_for_any_workspace(client: Client, ws: Workspace) -> None:
    resp = await client.post(
        f"/v1/admin/workspaces/{ws.id}/portal-sessions",
        json={"capabilities": "manage", "ttlSeconds": 60},
        headers=ADMIN_HEADERS,
    )
    assert resp.status == 201, await resp.text()
    made = await resp.json()
    token = (await exchange(client, made))["token"]
    me = await (await client.get("/v1/me", headers=bearer(token))).json()
    assert me["workspaceId"] == ws.id
    assert me["scopes"] == ["webhooks:read", "webhooks:write", "events:read"]
    missing = "WS" + "0" * 32
    resp = await client.post(
        f"/v1/admin/workspaces/{missing}/portal-sessions",
        json={"capabilities": "read"},
        headers=ADMIN_HEADERS,
    )
    assert resp.status == 404
    # Ended by the admin form: refused at the next request.
    resp = await client.delete(
        f"/v1/admin/workspaces/{ws.id}/portal-sessions/{made['id']}", headers=ADMIN_HEADERS
    )
    assert resp.status == 204
    assert (await client.get("/v1/me", headers=bearer(token))).status == 401
    # Another workspace's session through the admin form: 404.
    resp = await client.delete(
        f"/v1/admin/workspaces/{missing}/portal-sessions/{made['id']}", headers=ADMIN_HEADERS
    )
    assert resp.status == 404
    # A workspace key is no admin token.
    resp = await client.post(
        f"/v1/admin/workspaces/{ws.id}/portal-sessions",
        json={"capabilities": "read"},
        headers=ws.headers,
    )
    assert resp.status == 403


async def test_only_a_key_with_webhooks_write_makes_sessions(
    client: Client, make_workspace: MakeWorkspace
) -> None:
    reader = await make_workspace(["webhooks:read", "events:read"])
    resp = await client.post(
        "/v1/portal-sessions", json={"capabilities": "read"}, headers=reader.headers
    )
    assert resp.status == 403
    writer = await make_workspace(["webhooks:write"])
    await create(client, writer, capabilities="manage")
    assert (await client.post("/v1/portal-sessions", json={"capabilities": "read"})).status == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body.capabilities"),
        ({"capabilities": "admin"}, "body.capabilities"),
        ({"capabilities": "READ"}, "body.capabilities"),
        ({"capabilities": ["read"]}, "body.capabilities"),
        ({"capabilities": "read", "ttlSeconds": 59}, "body.ttlSeconds"),
        ({"capabilities": "read", "ttlSeconds": 86401}, "body.ttlSeconds"),
        ({"capabilities": "read", "ttlSeconds": "900"}, "body.ttlSeconds"),
        ({"capabilities": "read", "ttlSeconds": 900.5}, "body.ttlSeconds"),
        ({"capabilities": "read", "ttlSeconds": True}, "body.ttlSeconds"),
        ({"capabilities": "read", "parentOrigin": "http://app.example.com"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://app.example.com/"}, "body.parentOrigin"),
        (
            {"capabilities": "read", "parentOrigin": "https://app.example.com/x"},
            "body.parentOrigin",
        ),
        ({"capabilities": "read", "parentOrigin": "https://a.com?x"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://a.com#x"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://u@a.com"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://A.com"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://a.com 'self'"}, "body.parentOrigin"),
        (
            {"capabilities": "read", "parentOrigin": "https://a.com;script-src *"},
            "body.parentOrigin",
        ),
        ({"capabilities": "read", "parentOrigin": "https://a.com:99999"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "https://*.a.com"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": "*"}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": ""}, "body.parentOrigin"),
        ({"capabilities": "read", "parentOrigin": 1}, "body.parentOrigin"),
        ({"capabilities": "read", "other": 1}, "body.other"),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(
    client: Client, ws: Workspace, body: dict[str, Any], field: str
) -> None:
    for path, headers in (
        ("/v1/portal-sessions", ws.headers),
        (f"/v1/admin/workspaces/{ws.id}/portal-sessions", ADMIN_HEADERS),
    ):
        resp = await client.post(path, json=body, headers=headers)
        assert resp.status == 400, (path, await resp.text())
        found = await resp.json()
        assert [error["path"] for error in found["errors"]] == [field], found


@pytest.mark.parametrize(
    "origin",
    [
        "https://app.example.com",
        "https://app.example.com:8443",
        "https://xn--bcher-kva.example",
        "http://localhost:3000",
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
        "http://localhost",
    ],
)
async def test_a_parent_origin_may_frame_the_page(
    client: Client, ws: Workspace, origin: str
) -> None:
    made = await create(client, ws, capabilities="read", parentOrigin=origin)
    page = await client.get(urlsplit(made["url"]).path)
    assert page.status == 200
    policy = page.headers["Content-Security-Policy"]
    assert f"frame-ancestors {origin};" in policy
    assert policy == CONTENT_SECURITY_POLICY.replace(
        "frame-ancestors 'none'", f"frame-ancestors {origin}"
    )
    assert "X-Frame-Options" not in page.headers
    assert page.headers["Referrer-Policy"] == "no-referrer"


async def test_a_read_session_reads_and_is_refused_every_write(
    client: Client, ws: Workspace
) -> None:
    resp = await client.post("/v1/webhooks", json=HOOK, headers=ws.headers)
    hook = await resp.json()
    token = await session_token(client, ws, "read")
    listed = await client.get("/v1/webhooks", headers=bearer(token))
    assert listed.status == 200
    assert [h["id"] for h in (await listed.json())["data"]] == [hook["id"]]
    assert (await client.get("/v1/events", headers=bearer(token))).status == 200
    for method, path, body in [
        ("POST", "/v1/webhooks", HOOK),
        ("PATCH", f"/v1/webhooks/{hook['id']}", {"name": "x"}),
        ("DELETE", f"/v1/webhooks/{hook['id']}", None),
        ("POST", "/v1/events", {"type": "contact.updated", "data": {}}),
        ("GET", "/v1/messages", None),
        ("GET", "/v1/conversations", None),
        ("POST", "/v1/portal-sessions", {"capabilities": "read"}),
    ]:
        resp = await client.request(method, path, json=body, headers=bearer(token))
        assert resp.status == 403, (method, path, await resp.text())


async def test_a_manage_session_changes_webhooks_but_no_sessions_nor_messages(
    client: Client, ws: Workspace
) -> None:
    token = await session_token(client, ws, "manage")
    resp = await client.post("/v1/webhooks", json=HOOK, headers=bearer(token))
    assert resp.status == 201, await resp.text()
    hook = await resp.json()
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"name": "renamed"}, headers=bearer(token)
    )
    assert resp.status == 200
    # A session never makes (so never extends) or ends sessions, nor publishes, nor messages.
    other = await create(client, ws, capabilities="read")
    for method, path, body in [
        ("POST", "/v1/portal-sessions", {"capabilities": "manage"}),
        ("DELETE", f"/v1/portal-sessions/{other['id']}", None),
        ("POST", "/v1/events", {"type": "contact.updated", "data": {}}),
        ("GET", "/v1/messages", None),
    ]:
        resp = await client.request(method, path, json=body, headers=bearer(token))
        assert resp.status == 403, (method, path, await resp.text())
    await exchange(client, other)  # not deleted


async def test_a_session_never_reaches_the_admin_api_or_another_workspace(
    client: Client, make_workspace: MakeWorkspace
) -> None:
    mine, theirs = await make_workspace(), await make_workspace()
    resp = await client.post("/v1/webhooks", json=HOOK, headers=theirs.headers)
    their_hook = await resp.json()
    token = await session_token(client, mine, "manage")
    for method, path in [
        ("GET", "/v1/admin/workspaces"),
        ("GET", f"/v1/admin/workspaces/{mine.id}"),
        ("GET", f"/v1/admin/workspaces/{mine.id}/keys"),
        ("POST", f"/v1/admin/workspaces/{mine.id}/portal-sessions"),
    ]:
        body = {"capabilities": "manage"} if method == "POST" else None
        resp = await client.request(method, path, json=body, headers=bearer(token))
        assert resp.status == 403, (method, path, await resp.text())
    for method, path in [
        ("GET", f"/v1/webhooks/{their_hook['id']}"),
        ("DELETE", f"/v1/webhooks/{their_hook['id']}"),
    ]:
        resp = await client.request(method, path, headers=bearer(token))
        assert resp.status == 404, (method, path)
    listed = await (await client.get("/v1/webhooks", headers=bearer(token))).json()
    assert listed["data"] == []
    # Another workspace's session cannot be deleted by a key: 404, and it still works.
    theirs_made = await create(client, theirs, capabilities="read")
    resp = await client.delete(f"/v1/portal-sessions/{theirs_made['id']}", headers=mine.headers)
    assert resp.status == 404
    await exchange(client, theirs_made)


async def test_a_secret_is_exchanged_once(client: Client, ws: Workspace) -> None:
    made = await create(client, ws, capabilities="read")
    first = await exchange(client, made)
    again = await exchange(client, made, status=401)
    assert again["code"] == "unauthorized"
    # The first credential still works; neither the secret nor a made-up one is a credential.
    assert (await client.get("/v1/me", headers=bearer(first["token"]))).status == 200
    assert (await client.get("/v1/me", headers=bearer(secret_of(made)))).status == 401
    assert (await client.get("/v1/me", headers=bearer("dps_" + "x" * 43))).status == 401
    resp = await client.post("/v1/portal-sessions/exchange", json={"secret": "dpl_unknown"})
    assert resp.status == 401
    resp = await client.post("/v1/portal-sessions/exchange", json={"secret": ws.key})
    assert resp.status == 401
    resp = await client.post("/v1/portal-sessions/exchange", json={})
    assert resp.status == 400


async def test_a_session_ends_at_its_expiry(
    client: Client, ws: Workspace, clock: FakeClock
) -> None:
    made = await create(client, ws, capabilities="read", ttlSeconds=60)
    token = (await exchange(client, made))["token"]
    unused = await create(
        client, ws, capabilities="read", ttlSeconds=60, parentOrigin="https://a.example"
    )
    path = urlsplit(unused["url"]).path
    assert (
        "frame-ancestors https://a.example"
        in (await client.get(path)).headers["Content-Security-Policy"]
    )
    clock.advance(59)
    assert (await client.get("/v1/me", headers=bearer(token))).status == 200
    clock.advance(2)
    resp = await client.get("/v1/me", headers=bearer(token))
    assert resp.status == 401
    assert "ended" in (await resp.json())["message"]
    # The link is no longer exchanged, and its page may no longer be framed.
    await exchange(client, unused, status=401)
    page = await client.get(path)
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


async def test_a_deleted_session_is_refused_at_its_next_request(
    client: Client, ws: Workspace
) -> None:
    made = await create(client, ws, capabilities="manage")
    token = (await exchange(client, made))["token"]
    assert (await client.get("/v1/webhooks", headers=bearer(token))).status == 200
    resp = await client.delete(f"/v1/portal-sessions/{made['id']}", headers=ws.headers)
    assert resp.status == 204
    assert (await client.get("/v1/webhooks", headers=bearer(token))).status == 401
    # Again: 204. A link not exchanged yet is dead too.
    resp = await client.delete(f"/v1/portal-sessions/{made['id']}", headers=ws.headers)
    assert resp.status == 204
    unused = await create(client, ws, capabilities="read")
    await client.delete(f"/v1/portal-sessions/{unused['id']}", headers=ws.headers)
    await exchange(client, unused, status=401)
    for missing in ("PS" + "0" * 32, "nonsense"):
        resp = await client.delete(f"/v1/portal-sessions/{missing}", headers=ws.headers)
        assert resp.status == 404


async def test_no_secret_or_credential_reaches_a_log(client: Client, ws: Workspace) -> None:
    start = len(LOGGED)
    made = await create(client, ws, capabilities="read", parentOrigin="https://a.example")
    exchanged = await exchange(client, made)
    await client.get(urlsplit(made["url"]).path)
    await client.get("/v1/webhooks", headers=bearer(exchanged["token"]))
    await exchange(client, made, status=401)
    logged = "\n".join(LOGGED[start:])
    assert "api.request" in logged
    assert secret_of(made) not in logged and exchanged["token"] not in logged


def test_the_routes_are_documented() -> None:
    doc = document()
    paths = doc["paths"]
    create_op = paths["/v1/portal-sessions"]["post"]
    assert (
        create_op["security"] == [{"bearer": []}] and "webhooks:write" in create_op["description"]
    )
    assert set(create_op["responses"]) >= {"201", "400", "401", "403"}
    assert paths["/v1/portal-sessions/{portal_session_id}"]["delete"]["responses"].keys() >= {
        "204",
        "404",
    }
    exchange_op = paths["/v1/portal-sessions/exchange"]["post"]
    assert exchange_op["security"] == [] and "401" in exchange_op["responses"]
    admin = paths["/v1/admin/workspaces/{workspace_id}/portal-sessions"]["post"]
    assert admin["security"] == [{"admin": []}]
    assert (
        "delete" in paths["/v1/admin/workspaces/{workspace_id}/portal-sessions/{portal_session_id}"]
    )
    schemas = doc["components"]["schemas"]
    assert set(schemas["PortalSession"]["properties"]) == {"id", "url", "expiresAt"}
    body = schemas["CreatePortalSession"]
    assert body["required"] == ["capabilities"]
    assert body["properties"]["capabilities"]["enum"] == ["manage", "read"]
    ttl = body["properties"]["ttlSeconds"]
    assert (ttl["minimum"], ttl["maximum"], ttl["default"]) == (60, 86400, 900)
    assert "parentOrigin" in body["properties"]


async def test_links_are_made_on_the_public_url_when_set(services: Services, ws: Workspace) -> None:
    public = dataclasses.replace(
        services,
        settings=services.settings.with_changes(public_url="https://dispatcher.example.com/x"),
    )
    async with TestClient(TestServer(create_app(public), host="127.0.0.1")) as client:
        made = await create(client, ws, capabilities="read")
    assert made["url"].startswith(f"https://dispatcher.example.com/x/console/{made['id']}#portal=")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://dispatcher.example.com/", "https://dispatcher.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("ftp://a.example", None),
        ("https://a.example/?x=1", None),
        ("https://u@a.example", None),
        ("a.example", None),
    ],
)
def test_the_public_url_setting(raw: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ConfigurationError, match="DISPATCHER_PUBLIC_URL"):
            Settings.from_env({"DISPATCHER_PUBLIC_URL": raw})
    else:
        assert Settings.from_env({"DISPATCHER_PUBLIC_URL": raw}).public_url == expected

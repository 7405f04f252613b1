"""The admin API (docs/admin.md): tenants, their numbers and keys from code, with the admin
token and nothing else; a key it makes works at once, one it revokes stops at once everywhere;
bad input is a 400 naming the field and changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.api.registry import document
from dispatcher.domain.signing import new_secret
from dispatcher.errors import NotFound
from dispatcher.store import operator_sink, workspaces
from dispatcher.store.database import Database
from dispatcher.store.key_cache import KeyCache
from tests.conftest import ADMIN_HEADERS, ADMIN_TOKEN, Workspace, wait_for

ADMIN_OPERATIONS = [
    (method, path)
    for path, operations in document()["paths"].items()
    for method, operation in operations.items()
    if "admin" in operation.get("tags", ())
]
MISSING = "WS" + "0" * 32


def concrete(path: str, workspace_id: str = MISSING) -> str:
    return (
        path.replace("{workspace_id}", workspace_id)
        .replace("{key_id}", "AK" + "0" * 32)
        .replace("{portal_session_id}", "PS" + "0" * 32)
    )


async def count(db: Database, table: str) -> int:
    async with db.acquire() as conn:
        found: int = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return found


async def created(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> Any:
    resp = await client.post(path, json=body, headers=ADMIN_HEADERS)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def refused(
    client: TestClient[Any, Any], method: str, path: str, body: Any, status: int = 400
) -> dict[str, Any]:
    resp = await client.request(method, path, json=body, headers=ADMIN_HEADERS)
    assert resp.status == status, await resp.text()
    found: dict[str, Any] = await resp.json()
    return found


def test_the_admin_routes_are_documented_apart() -> None:
    doc = document()
    assert sorted(ADMIN_OPERATIONS) == sorted(
        [
            ("post", "/v1/admin/workspaces"),
            ("get", "/v1/admin/workspaces"),
            ("get", "/v1/admin/workspaces/{workspace_id}"),
            ("post", "/v1/admin/workspaces/{workspace_id}/numbers"),
            ("get", "/v1/admin/workspaces/{workspace_id}/numbers"),
            ("post", "/v1/admin/workspaces/{workspace_id}/keys"),
            ("get", "/v1/admin/workspaces/{workspace_id}/keys"),
            ("delete", "/v1/admin/workspaces/{workspace_id}/keys/{key_id}"),
            ("post", "/v1/admin/workspaces/{workspace_id}/portal-sessions"),
            (
                "delete",
                "/v1/admin/workspaces/{workspace_id}/portal-sessions/{portal_session_id}",
            ),
        ]
    )
    for method, path in ADMIN_OPERATIONS:
        operation = doc["paths"][path][method]
        assert operation["security"] == [{"admin": []}], (method, path)
        assert {"401", "403", "404"} <= set(operation["responses"]), (method, path)
    assert doc["components"]["securitySchemes"]["admin"]["scheme"] == "bearer"
    assert "409" in doc["paths"]["/v1/admin/workspaces/{workspace_id}/numbers"]["post"]["responses"]
    schemas = doc["components"]["schemas"]
    assert set(schemas["Workspace"]["properties"]) == {"id", "name", "createdAt"}
    assert set(schemas["PhoneNumber"]["properties"]) == {"id", "number", "workspaceId", "createdAt"}
    assert set(schemas["NewApiKey"]["properties"]) == {
        "id",
        "key",
        "scopes",
        "name",
        "createdAt",
        "webhookId",
    }
    assert "key" not in schemas["ApiKey"]["properties"]


async def test_an_operator_onboards_a_tenant(client: TestClient[Any, Any], db: Database) -> None:
    """Workspace, number, key; the key works on the workspace's own API at once."""
    made = await created(client, "/v1/admin/workspaces", {"name": "Acme"})
    assert set(made) == {"id", "name", "createdAt"}
    assert made["id"].startswith("WS") and made["name"] == "Acme"
    resp = await client.get(f"/v1/admin/workspaces/{made['id']}", headers=ADMIN_HEADERS)
    assert resp.status == 200 and await resp.json() == made

    base = f"/v1/admin/workspaces/{made['id']}"
    number = await created(client, f"{base}/numbers", {"number": "+15555550777"})
    assert set(number) == {"id", "number", "workspaceId", "createdAt"}
    assert number["id"].startswith("PN")
    assert (number["number"], number["workspaceId"]) == ("+15555550777", made["id"])

    key = await created(client, f"{base}/keys", {"scopes": ["messages:write"], "name": "CRM"})
    assert set(key) == {"id", "key", "scopes", "name", "createdAt", "webhookId"}
    assert key["id"].startswith("AK") and key["key"].startswith("dk_")
    assert (key["scopes"], key["name"]) == (["messages:write"], "CRM")
    unnamed = await created(client, f"{base}/keys", {"scopes": ["webhooks:read", "events:read"]})
    assert unnamed["name"] is None and unnamed["scopes"] == ["events:read", "webhooks:read"]

    tenant = {"Authorization": f"Bearer {key['key']}"}
    resp = await client.post(
        "/v1/messages",
        json={"from": "+15555550777", "to": "+15555550123", "text": "hi"},
        headers=tenant,
    )
    assert resp.status == 202, await resp.text()
    # Its scopes, no more.
    assert (await client.get("/v1/webhooks", headers=tenant)).status == 403

    resp = await client.get(f"{base}/keys", headers=ADMIN_HEADERS)
    listed = await resp.json()
    assert [k["id"] for k in listed["data"]] == [unnamed["id"], key["id"]]
    assert all(
        set(k) == {"id", "scopes", "name", "createdAt", "revokedAt", "webhookId"}
        for k in listed["data"]
    )
    text = await resp.text()
    assert key["key"] not in text and unnamed["key"] not in text
    resp = await client.get(f"{base}/numbers", headers=ADMIN_HEADERS)
    assert (await resp.json())["data"] == [number]
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT name FROM api_keys WHERE id = $1", key["id"]) == "CRM"


async def test_a_revoked_key_is_refused_at_once_in_every_replica(
    services: Services, database_url: str
) -> None:
    """Two `serve` processes, each keeping the keys it has seen valid in memory: revoked
    through one, the key is refused there before the answer, and in the other as soon as the
    revocation commits (the NOTIFY of store/key_cache.py)."""
    caches = [KeyCache(), KeyCache()]
    watchers = [asyncio.create_task(cache.watch(database_url)) for cache in caches]
    try:
        await wait_for(lambda: all(c.listening for c in caches), message="the key listeners")
        async with (
            TestClient(TestServer(create_app(dataclasses.replace(services, keys=caches[0])))) as a,
            TestClient(TestServer(create_app(dataclasses.replace(services, keys=caches[1])))) as b,
        ):
            made = await created(a, "/v1/admin/workspaces", {"name": "Acme"})
            base = f"/v1/admin/workspaces/{made['id']}/keys"
            key = await created(a, base, {"scopes": ["messages:read"]})
            tenant = {"Authorization": f"Bearer {key['key']}"}
            for replica in (a, b):  # both now hold it in memory
                assert (await replica.get("/v1/messages", headers=tenant)).status == 200
            generation = caches[1].generation
            resp = await a.delete(f"{base}/{key['id']}", headers=ADMIN_HEADERS)
            assert resp.status == 204 and await resp.read() == b""
            assert (await a.get("/v1/messages", headers=tenant)).status == 401
            await wait_for(lambda: caches[1].generation > generation, within=5, message="NOTIFY")
            assert (await b.get("/v1/messages", headers=tenant)).status == 401
            listed = await (await a.get(base, headers=ADMIN_HEADERS)).json()
            assert listed["data"][0]["revokedAt"] is not None
            # Revoking again changes nothing and says so the same way.
            assert (await a.delete(f"{base}/{key['id']}", headers=ADMIN_HEADERS)).status == 204
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


async def test_another_workspaces_key_is_not_found(
    client: TestClient[Any, Any], make_workspace: Any, db: Database
) -> None:
    first: Workspace = await make_workspace()
    second: Workspace = await make_workspace()
    async with db.acquire() as conn:
        key_id = await conn.fetchval("SELECT id FROM api_keys WHERE workspace_id = $1", first.id)
    resp = await client.delete(
        f"/v1/admin/workspaces/{second.id}/keys/{key_id}", headers=ADMIN_HEADERS
    )
    assert resp.status == 404
    assert (await resp.json())["code"] == "not_found"
    assert (await client.get("/v1/messages", headers=first.headers)).status == 200
    resp = await client.delete(
        f"/v1/admin/workspaces/{first.id}/keys/AK{'0' * 32}", headers=ADMIN_HEADERS
    )
    assert resp.status == 404


async def test_a_number_belongs_to_one_workspace(
    client: TestClient[Any, Any], db: Database
) -> None:
    first = await created(client, "/v1/admin/workspaces", {"name": "one"})
    second = await created(client, "/v1/admin/workspaces", {"name": "two"})
    body = {"number": "+15555550888"}
    await created(client, f"/v1/admin/workspaces/{first['id']}/numbers", body)
    for owner in (first, second):  # again in the same workspace, or in another
        error = await refused(
            client, "POST", f"/v1/admin/workspaces/{owner['id']}/numbers", body, 409
        )
        assert error["code"] == "conflict" and "+15555550888" in error["message"]
    assert await count(db, "phone_numbers") == 1


async def test_an_unknown_workspace_is_404_everywhere(
    client: TestClient[Any, Any], db: Database
) -> None:
    cases: list[tuple[str, str, Any]] = [
        ("GET", f"/v1/admin/workspaces/{MISSING}", None),
        ("GET", f"/v1/admin/workspaces/{MISSING}/numbers", None),
        ("POST", f"/v1/admin/workspaces/{MISSING}/numbers", {"number": "+15555550999"}),
        ("GET", f"/v1/admin/workspaces/{MISSING}/keys", None),
        ("POST", f"/v1/admin/workspaces/{MISSING}/keys", {"scopes": ["messages:read"]}),
        ("DELETE", f"/v1/admin/workspaces/{MISSING}/keys/AK{'0' * 32}", None),
        ("GET", "/v1/admin/workspaces/not-an-id", None),
    ]
    for method, path, body in cases:
        error = await refused(client, method, path, body, 404)
        assert error["code"] == "not_found", (method, path)
    assert await count(db, "phone_numbers") == 0 and await count(db, "api_keys") == 0


BAD_BODIES = [
    ("/v1/admin/workspaces", {}, "body.name", "field required"),
    ("/v1/admin/workspaces", {"name": ""}, "body.name", "at least 1 character"),
    ("/v1/admin/workspaces", {"name": " \u200b "}, "body.name", "visible characters"),
    ("/v1/admin/workspaces", {"name": "a\nb"}, "body.name", "one line"),
    ("/v1/admin/workspaces", {"name": "bell\x07"}, "body.name", "control characters"),
    ("/v1/admin/workspaces", {"name": "x" * 256}, "body.name", "at most 255"),
    ("/v1/admin/workspaces", {"name": 7}, "body.name", "valid string"),
    ("/v1/admin/workspaces", {"name": "ok", "demo": True}, "body.demo", "unknown field"),
    ("{ws}/numbers", {}, "body.number", "field required"),
    ("{ws}/numbers", {"number": "555-1234"}, "body.number", "E.164"),
    ("{ws}/numbers", {"number": "+1555555\n"}, "body.number", "E.164"),
    ("{ws}/numbers", {"number": 15555550100}, "body.number", "valid string"),
    ("{ws}/keys", {}, "body.scopes", "field required"),
    ("{ws}/keys", {"scopes": []}, "body.scopes", "at least 1 item"),
    ("{ws}/keys", {"scopes": ["root"]}, "body.scopes.0", "messages:read"),
    ("{ws}/keys", {"scopes": ["messages:read"] * 2}, "body.scopes", "repeat"),
    ("{ws}/keys", {"scopes": "messages:read"}, "body.scopes", "valid list"),
    ("{ws}/keys", {"scopes": ["messages:read"], "name": "\t"}, "body.name", "visible"),
    ("{ws}/keys", {"scopes": ["messages:read"], "name": "a\rb"}, "body.name", "one line"),
]


@pytest.mark.parametrize(("path", "body", "field", "words"), BAD_BODIES)
async def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    path: str,
    body: dict[str, Any],
    field: str,
    words: str,
) -> None:
    before = [await count(db, table) for table in ("workspaces", "phone_numbers", "api_keys")]
    url = path.replace("{ws}", f"/v1/admin/workspaces/{ws.id}")
    error = await refused(client, "POST", url, body)
    assert error["code"] == "validation_error"
    (detail,) = error["errors"]
    assert detail["path"] == field and words in detail["message"], detail
    after = [await count(db, table) for table in ("workspaces", "phone_numbers", "api_keys")]
    assert after == before


async def test_every_admin_list_is_paged_by_cursor(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    names = [f"tenant {n}" for n in range(5)]
    for name in names:
        await created(client, "/v1/admin/workspaces", {"name": name})
    for n in range(3):
        await created(
            client, f"/v1/admin/workspaces/{ws.id}/numbers", {"number": f"+1555123000{n}"}
        )
        await created(client, f"/v1/admin/workspaces/{ws.id}/keys", {"scopes": ["messages:read"]})

    async def walk(path: str) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        params = {"limit": "2"}
        while True:
            resp = await client.get(path, params=params, headers=ADMIN_HEADERS)
            assert resp.status == 200, await resp.text()
            page = await resp.json()
            assert len(page["data"]) <= 2
            seen += page["data"]
            if page["nextCursor"] is None:
                return seen
            params = {"limit": "2", "cursor": page["nextCursor"]}

    workspaces_seen = await walk("/v1/admin/workspaces")
    assert [w["name"] for w in workspaces_seen] == [*reversed(names), "ws1"]  # newest first
    numbers = await walk(f"/v1/admin/workspaces/{ws.id}/numbers")
    assert [n["number"] for n in numbers] == [
        "+15551230002", "+15551230001", "+15551230000", ws.number
    ]  # fmt: skip
    keys = await walk(f"/v1/admin/workspaces/{ws.id}/keys")
    assert len(keys) == 4 and len({k["id"] for k in keys}) == 4

    # A cursor belongs to its list: another workspace's keys, or the workspaces, refuse it.
    first = await (
        await client.get(
            f"/v1/admin/workspaces/{ws.id}/keys", params={"limit": "1"}, headers=ADMIN_HEADERS
        )
    ).json()
    other = workspaces_seen[0]["id"]
    for path in (f"/v1/admin/workspaces/{other}/keys", "/v1/admin/workspaces"):
        resp = await client.get(path, params={"cursor": first["nextCursor"]}, headers=ADMIN_HEADERS)
        assert resp.status == 400 and (await resp.json())["code"] == "invalid_cursor"
    resp = await client.get("/v1/admin/workspaces", params={"limit": "0"}, headers=ADMIN_HEADERS)
    assert resp.status == 400 and (await resp.json())["errors"][0]["path"] == "query.limit"


@pytest.mark.parametrize(("method", "path"), ADMIN_OPERATIONS)
async def test_only_the_admin_token_opens_the_admin_api(
    client: TestClient[Any, Any], ws: Workspace, method: str, path: str
) -> None:
    """A workspace key (even one with every scope) is 403; no token, another token, or
    the token under another scheme is 401."""
    url = concrete(path, ws.id)
    resp = await client.request(method.upper(), url, headers=ws.headers)
    assert resp.status == 403, await resp.text()
    assert (await resp.json())["code"] == "forbidden"
    for headers in (
        {},
        {"Authorization": f"Bearer {ADMIN_TOKEN}x"},
        {"Authorization": f"Bearer {ADMIN_TOKEN[:-1]}"},
        {"Authorization": f"Basic {ADMIN_TOKEN}"},
        {"Authorization": "Bearer dk_unknown"},
    ):
        resp = await client.request(method.upper(), url, headers=headers)
        assert resp.status == 401, (headers, await resp.text())
        assert (await resp.json())["code"] == "unauthorized"
        assert ADMIN_TOKEN not in await resp.text()


async def test_the_admin_token_opens_no_workspace_endpoint(
    client: TestClient[Any, Any],
) -> None:
    workspace_routes = [
        (method, re.sub(r"\{\w+\}", "XX" + "0" * 32, path))
        for path, operations in document()["paths"].items()
        for method, operation in operations.items()
        if operation["security"] == [{"bearer": []}]
    ]
    assert ("post", "/v1/webhooks") in workspace_routes
    for method, path in workspace_routes:
        resp = await client.request(method.upper(), path, headers=ADMIN_HEADERS)
        assert resp.status == 401, (method, path, await resp.text())
        body = await resp.json()
        assert body["code"] == "unauthorized" and "admin token" in body["message"]


async def test_without_the_setting_every_admin_route_is_404(
    services: Services, ws: Workspace, db: Database
) -> None:
    """Unset, the admin API is not there at all: 404 before anything is read, whatever is
    sent (the token of another deployment, a workspace key, a query, a body)."""
    off = dataclasses.replace(services, settings=services.settings.with_changes(admin_token=None))
    async with TestClient(TestServer(create_app(off), host="127.0.0.1")) as client:
        for method, path in ADMIN_OPERATIONS:
            url = concrete(path, ws.id)
            for headers in ({}, ADMIN_HEADERS, ws.headers):
                resp = await client.request(
                    method.upper(), url, headers=headers, params={"x": "1"}, json={"name": "x"}
                )
                assert resp.status == 404, (method, path, await resp.text())
                assert (await resp.json())["code"] == "not_found"
        # The rest of the API is unchanged.
        assert (await client.get("/v1/messages", headers=ws.headers)).status == 200
    assert await count(db, "workspaces") == 1


@pytest.fixture
async def tenant_key(client: TestClient[Any, Any]) -> AsyncIterator[str]:
    made = await created(client, "/v1/admin/workspaces", {"name": "Acme"})
    key = await created(
        client, f"/v1/admin/workspaces/{made['id']}/keys", {"scopes": ["webhooks:write"]}
    )
    yield str(key["key"])


async def test_a_key_made_by_the_admin_api_sees_only_its_workspace(
    client: TestClient[Any, Any], ws: Workspace, tenant_key: str
) -> None:
    mine = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["call.missed"]},
        headers={"Authorization": f"Bearer {tenant_key}"},
    )
    assert mine.status == 201
    hook = (await mine.json())["id"]
    resp = await client.get(f"/v1/webhooks/{hook}", headers=ws.headers)
    assert resp.status == 404


# A valid body for each admin route that takes one: with it, only the workspace can be at fault.
VALID_BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/admin/workspaces/{workspace_id}/numbers"): {"number": "+15555550177"},
    ("post", "/v1/admin/workspaces/{workspace_id}/keys"): {"scopes": ["events:read"]},
    ("post", "/v1/admin/workspaces/{workspace_id}/portal-sessions"): {"capabilities": "read"},
}


async def test_the_operator_sinks_workspace_is_nobodys_to_change(
    client: TestClient[Any, Any], db: Database
) -> None:
    """Every admin route of a workspace answers 404 for the operator sink's, as for a missing
    one, and writes nothing: a key there would read every tenant's operational events and
    could repoint the sink; a number there would route calls into it."""
    await operator_sink.configure(db, "https://ops.example/sink", new_secret(), datetime.now(UTC))
    async with db.acquire() as conn:
        operator = await conn.fetchval("SELECT id FROM workspaces WHERE operator")
        # A key an older version let the admin API make there.
        await conn.execute(
            "INSERT INTO api_keys (id, workspace_id, key_hash, scopes) "
            "VALUES ('AKold', $1, '\\x00'::bytea, '{events:read}')",
            operator,
        )
    before = (await count(db, "phone_numbers"), await count(db, "api_keys"))
    routes = [(m, p) for m, p in ADMIN_OPERATIONS if "{workspace_id}" in p]
    assert routes
    for method, path in routes:
        if method != "get":
            assert (method, path) in VALID_BODIES or method == "delete", (method, path)
        body = VALID_BODIES.get((method, path))
        target = concrete(path, operator).replace("AK" + "0" * 32, "AKold")
        resp = await client.request(method, target, json=body, headers=ADMIN_HEADERS)
        assert resp.status == 404, (method, path, await resp.text())
        assert (await resp.json())["code"] == "not_found"
    assert (await count(db, "phone_numbers"), await count(db, "api_keys")) == before
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT revoked_at FROM api_keys WHERE id = 'AKold'") is None
    # The CLI's door (the same store functions) refuses it too; `keys revoke KEY_ID` can still
    # revoke a key made there before.
    with pytest.raises(NotFound):
        await workspaces.insert_key(db, operator, ["events:read"])
    with pytest.raises(NotFound):
        await workspaces.insert_number(db, operator, "+15555550178")
    await workspaces.revoke_key(db, "AKold")
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT revoked_at FROM api_keys WHERE id = 'AKold'")

"""A subscription's `auth` (OAuth 2.0 client credentials) as the API takes it: created with
its `clientSecret`, answered without it (write-only, in every answer and in the OpenAPI
document), patched whole (the stored secret kept for the same tokenUrl and clientId), removed
by null, and refused naming the field, with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api.registry import document
from dispatcher.store.database import Database
from tests.conftest import Workspace
from tests.engine.helpers import get_json

URL = "https://hooks.example.com/in"
SECRET = "s3cr3t-Value-never-answered"
AUTH = {
    "type": "oauth2",
    "tokenUrl": "https://auth.example.com/oauth/token",
    "clientId": "dispatcher-client",
    "clientSecret": SECRET,
}
ANSWERED = {
    "type": "oauth2",
    "tokenUrl": "https://auth.example.com/oauth/token",
    "clientId": "dispatcher-client",
}


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["contact.updated"], **fields}
    return await client.post("/v1/webhooks", json=body, headers=ws.headers)


async def stored_auth(db: Database, hook_id: str) -> Any:
    async with db.acquire() as conn:
        return await conn.fetchval("SELECT auth FROM webhooks WHERE id = $1", hook_id)


async def test_created_answered_without_its_secret(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    plain = await (await create(client, ws)).json()
    assert plain["auth"] is None

    made = await create(client, ws, auth={**AUTH, "scope": "hooks:write a.b", "audience": "x"})
    assert made.status == 201, await made.text()
    text = await made.text()
    assert SECRET not in text
    hook = await made.json()
    assert hook["auth"] == {**ANSWERED, "scope": "hooks:write a.b", "audience": "x"}
    path = f"/v1/webhooks/{hook['id']}"
    for answer in (
        await get_json(client, ws, path),
        *(await get_json(client, ws, "/v1/webhooks"))["data"],
    ):
        assert "clientSecret" not in (answer["auth"] or {})
    listed = await client.get("/v1/webhooks", headers=ws.headers)
    assert SECRET not in await listed.text()
    # Stored as given, the secret with it (the engine sends it to the token URL).
    assert (await stored_auth(db, hook["id"]))["clientSecret"] == SECRET


async def test_patch_replaces_keeps_the_secret_and_null_removes(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await (await create(client, ws, auth=AUTH)).json()
    path = f"/v1/webhooks/{hook['id']}"

    async def patched(body: dict[str, Any], status: int = 200) -> Any:
        resp = await client.patch(path, json=body, headers=ws.headers)
        assert resp.status == status, await resp.text()
        assert SECRET not in await resp.text()
        return await resp.json()

    assert (await patched({"name": "kept"}))["auth"] == ANSWERED  # absent keeps
    # Without clientSecret, same tokenUrl and clientId: the stored secret is kept.
    no_secret = {k: v for k, v in AUTH.items() if k != "clientSecret"}
    answer = await patched({"auth": {**no_secret, "scope": "read"}})
    assert answer["auth"] == {**ANSWERED, "scope": "read"}
    assert await stored_auth(db, hook["id"]) == {**AUTH, "scope": "read"}
    # Replaced whole: the scope left out is gone.
    await patched({"auth": no_secret})
    assert await stored_auth(db, hook["id"]) == AUTH
    # A new secret is taken.
    await patched({"auth": {**AUTH, "clientSecret": "another-one"}})
    assert (await stored_auth(db, hook["id"]))["clientSecret"] == "another-one"
    # Another token URL or client needs the secret: 400 naming it, nothing changed.
    for change in ({"tokenUrl": "https://evil.example.com/token"}, {"clientId": "other"}):
        refused = await patched({"auth": {**no_secret, **change}}, 400)
        assert [e["path"] for e in refused["errors"]] == ["body.auth.clientSecret"]
    assert (await stored_auth(db, hook["id"]))["clientSecret"] == "another-one"
    # null removes it; then a PATCH without the secret has nothing to keep.
    assert (await patched({"auth": None}))["auth"] is None
    assert await stored_auth(db, hook["id"]) is None
    refused = await patched({"auth": no_secret}, 400)
    assert [e["path"] for e in refused["errors"]] == ["body.auth.clientSecret"]
    assert (await patched({"auth": AUTH}))["auth"] == ANSWERED


BAD = [
    ({"type": "basic"}, "body.auth.type"),
    ({"tokenUrl": "ftp://auth.example.com/token"}, "body.auth.tokenUrl"),
    ({"tokenUrl": "not a url"}, "body.auth.tokenUrl"),
    ({"tokenUrl": None}, "body.auth.tokenUrl"),
    ({"clientId": ""}, "body.auth.clientId"),
    ({"clientId": "x" * 256}, "body.auth.clientId"),
    ({"clientId": "caf\u00e9"}, "body.auth.clientId"),
    ({"clientSecret": ""}, "body.auth.clientSecret"),
    ({"clientSecret": "line\nbreak"}, "body.auth.clientSecret"),
    ({"clientSecret": 5}, "body.auth.clientSecret"),
    ({"scope": "two  spaces"}, "body.auth.scope"),
    ({"scope": 'quote"d'}, "body.auth.scope"),
    ({"audience": ""}, "body.auth.audience"),
    ({"grantType": "password"}, "body.auth.grantType"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
async def test_refused_naming_the_field_nothing_stored(
    client: TestClient[Any, Any], ws: Workspace, db: Database, change: dict[str, Any], field: str
) -> None:
    resp = await create(client, ws, auth={**AUTH, **change})
    assert resp.status == 400, await resp.text()
    assert SECRET not in await resp.text()
    assert field in [e["path"] for e in (await resp.json())["errors"]]
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM webhooks") == 0

    hook = await (await create(client, ws, auth=AUTH)).json()
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"auth": {**AUTH, **change}}, headers=ws.headers
    )
    assert resp.status == 400, await resp.text()
    assert field in [e["path"] for e in (await resp.json())["errors"]]
    assert await stored_auth(db, hook["id"]) == AUTH


async def test_missing_parts_and_wrong_shapes_are_refused(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for key in ("type", "tokenUrl", "clientId", "clientSecret"):
        partial = {k: v for k, v in AUTH.items() if k != key}
        resp = await create(client, ws, auth=partial)
        assert resp.status == 400, key
        assert [e["path"] for e in (await resp.json())["errors"]] == [f"body.auth.{key}"]
    for shape in ("oauth2", [AUTH], 1):
        resp = await create(client, ws, auth=shape)
        assert resp.status == 400
        assert {e["path"] for e in (await resp.json())["errors"]} == {"body.auth"}


def test_the_document_shows_the_shapes_the_secret_write_only() -> None:
    schemas = document()["components"]["schemas"]
    given = schemas["OAuth2Auth"]
    assert set(given["required"]) == {"type", "tokenUrl", "clientId", "clientSecret"}
    assert given["properties"]["clientSecret"]["writeOnly"] is True
    assert given["additionalProperties"] is False
    change = schemas["OAuth2AuthChange"]
    assert "clientSecret" not in change["required"]
    answered = schemas["WebhookAuth"]
    assert "clientSecret" not in answered["properties"]
    assert set(answered["properties"]) == {*ANSWERED, "scope", "audience"}
    assert set(answered["required"]) == set(ANSWERED)
    assert "auth" in schemas["Webhook"]["properties"]
    assert "auth" in schemas["CreateWebhook"]["properties"]

"""`GET /v1/me`: any valid workspace key learns its workspace, its id and its scopes (the
console reads it to show only what the key may do); no key, or a revoked one, learns nothing."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api.framework.openapi import ANY_KEY
from dispatcher.api.registry import document
from dispatcher.domain.enums import Scope
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace


async def test_a_full_key_learns_its_workspace_id_and_every_scope(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    resp = await client.get("/v1/me", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"workspaceId", "keyId", "scopes"}
    assert body["workspaceId"] == ws.id
    assert body["keyId"].startswith("AK")
    # Every scope, in the order the API documents them.
    assert body["scopes"] == [scope.value for scope in Scope]


@pytest.mark.parametrize("scope", list(Scope))
async def test_a_key_with_any_one_scope_may_ask(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace, scope: Scope
) -> None:
    only = await make_workspace(scopes=[scope.value])
    resp = await client.get("/v1/me", headers=only.headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["workspaceId"] == only.id
    assert body["scopes"] == [scope.value]


async def test_two_keys_of_one_workspace_are_told_apart(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    key_id, key = await workspaces.create_key(db, ws.id, ["webhooks:read", "events:read"])
    resp = await client.get("/v1/me", headers={"Authorization": f"Bearer {key}"})
    body = await resp.json()
    assert body == {
        "workspaceId": ws.id,
        "keyId": key_id,
        "scopes": ["webhooks:read", "events:read"],
    }
    mine = await (await client.get("/v1/me", headers=ws.headers)).json()
    assert mine["keyId"] != key_id


async def test_no_key_a_wrong_key_or_a_revoked_key_is_401(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    key_id, key = await workspaces.create_key(db, ws.id, ["messages:read"])
    assert (await client.get("/v1/me", headers={"Authorization": f"Bearer {key}"})).status == 200
    await workspaces.revoke_key(db, key_id)
    for headers in (
        {},
        {"Authorization": f"Bearer {key}"},
        {"Authorization": "Bearer dk_not_a_key_at_all_0000000000000000"},
        {"Authorization": f"Basic {ws.key}"},
    ):
        resp = await client.get("/v1/me", headers=headers)
        assert resp.status == 401, headers
        body = await resp.json()
        assert body["code"] == "unauthorized"
        assert "workspaceId" not in body


async def test_it_takes_no_query_and_no_body(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.get("/v1/me?scope=webhooks:write", headers=ws.headers)
    assert resp.status == 400
    assert (await resp.json())["errors"][0]["path"] == "query.scope"
    resp = await client.request("GET", "/v1/me", json={"scopes": []}, headers=ws.headers)
    assert resp.status == 400
    assert (await resp.json())["errors"] == [{"path": "body.scopes", "message": "unknown field"}]
    assert (await client.post("/v1/me", headers=ws.headers)).status == 405


def test_the_document_says_any_key_may_call_it() -> None:
    operation = document()["paths"]["/v1/me"]["get"]
    assert operation["operationId"] == "getMe"
    assert operation["security"] == [{"bearer": []}]
    assert operation["description"] == ANY_KEY
    # It can refuse the key, never for a scope.
    assert "401" in operation["responses"] and "403" not in operation["responses"]
    me = document()["components"]["schemas"]["Me"]
    assert me["required"] == ["workspaceId", "keyId", "scopes"]
    assert me["properties"]["scopes"]["items"] == {"$ref": "#/components/schemas/Scope"}

"""Conventions every endpoint shares: auth, scopes, the error shape, request ids, bodies."""

from __future__ import annotations

import io
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

SEND = {"from": "", "to": "+15555550123", "text": "hi"}


def assert_error(body: dict[str, Any], status: int, code: str) -> None:
    assert body["status"] == status
    assert body["code"] == code
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["trace"], str) and body["trace"]


async def test_missing_key_is_401(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/v1/messages")
    assert resp.status == 401
    body = await resp.json()
    assert_error(body, 401, "unauthorized")
    assert body["trace"] == resp.headers["X-Request-Id"]


async def test_unknown_key_is_401(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/v1/messages", headers={"Authorization": "Bearer dk_nope"})
    assert resp.status == 401
    assert_error(await resp.json(), 401, "unauthorized")


async def test_revoked_key_is_refused_at_once(
    client: TestClient[Any, Any], db: Database, ws: Workspace
) -> None:
    assert (await client.get("/v1/messages", headers=ws.headers)).status == 200
    key = await workspaces.find_key(db, ws.key)
    assert key is not None
    await workspaces.revoke_key(db, key.id)
    assert (await client.get("/v1/messages", headers=ws.headers)).status == 401


async def test_key_without_scope_is_403(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace
) -> None:
    reader = await make_workspace(scopes=["messages:read"])
    resp = await client.post(
        "/v1/messages", json={**SEND, "from": reader.number}, headers=reader.headers
    )
    assert resp.status == 403
    body = await resp.json()
    assert_error(body, 403, "forbidden")
    assert "messages:write" in body["message"]
    # Nothing was created.
    listed = await (await client.get("/v1/messages", headers=reader.headers)).json()
    assert listed["data"] == []


async def test_every_response_has_a_request_id(client: TestClient[Any, Any], ws: Workspace) -> None:
    ok = await client.get("/v1/messages", headers=ws.headers)
    assert len(ok.headers["X-Request-Id"]) >= 8
    given = await client.get(
        "/v1/messages", headers={**ws.headers, "X-Request-Id": "my-trace-12345"}
    )
    assert given.headers["X-Request-Id"] == "my-trace-12345"


async def test_unknown_route_and_method(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.get("/v1/nothing-here", headers=ws.headers)
    assert resp.status == 404
    assert_error(await resp.json(), 404, "not_found")
    resp = await client.delete("/v1/messages", headers=ws.headers)
    assert resp.status == 405
    assert_error(await resp.json(), 405, "method_not_allowed")
    assert "GET" in resp.headers["Allow"]


async def test_wrong_content_type_is_415(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.post(
        "/v1/messages",
        data="from=x",
        headers={**ws.headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert resp.status == 415
    assert_error(await resp.json(), 415, "unsupported_media_type")


async def test_invalid_json_is_400(client: TestClient[Any, Any], ws: Workspace) -> None:
    for raw in (b"{not json", b"\xff\xfe", b""):
        resp = await client.post(
            "/v1/messages",
            data=raw,
            headers={**ws.headers, "Content-Type": "application/json"},
        )
        assert resp.status == 400, raw
        assert_error(await resp.json(), 400, "invalid_json")


async def test_body_over_one_mib_is_413(client: TestClient[Any, Any], ws: Workspace) -> None:
    big = b'{"text": "' + b"a" * (1024 * 1024 + 10) + b'"}'
    resp = await client.post(
        "/v1/messages",
        data=io.BytesIO(big),
        headers={**ws.headers, "Content-Type": "application/json"},
    )
    assert resp.status == 413
    assert_error(await resp.json(), 413, "payload_too_large")


async def test_body_must_be_an_object(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.post("/v1/messages", json=[1, 2], headers=ws.headers)
    assert resp.status == 400
    body = await resp.json()
    assert_error(body, 400, "validation_error")
    assert body["errors"] == [{"path": "body", "message": "the body must be a JSON object"}]


async def test_unknown_fields_are_named(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.post(
        "/v1/messages", json={**SEND, "from": ws.number, "colour": "red"}, headers=ws.headers
    )
    assert resp.status == 400
    body = await resp.json()
    assert {"path": "body.colour", "message": "unknown field"} in body["errors"]


async def test_health_probes_need_no_key(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["checks"] == {"database": True, "schema": True}


async def test_a_repeated_key_is_400_however_it_is_spelled_and_stores_nothing(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    repeated = (
        b'{"type":"contact.updated","data":{"id":"CT1","id":"CT2"}}',
        b'{"type":"contact.updated","data":{"id":"CT1"},"type" :"contact.deleted"}',
        b'{"type":"contact.updated","data":{"id":"CT1","x":"a\\":b","x"\n:1}}',
        b'{"type":"contact.updated","data":{"a\\\\":1,"a\\\\" : 2}}',
    )
    for raw in repeated:
        resp = await client.post(
            "/v1/events", data=raw, headers={**ws.headers, "Content-Type": "application/json"}
        )
        assert resp.status == 400, raw
        assert_error(await resp.json(), 400, "invalid_json")
    listed = await client.get("/v1/events", headers=ws.headers)
    assert (await listed.json())["data"] == []
    # A quote and a colon inside a string are no key: these bodies repeat nothing.
    for raw in (
        b'{"type":"contact.updated","data":{"id":"CT1","note":"say \\":\\" twice"}}',
        b'{"type" : "contact.updated", "data" : {"id" : "CT1", "x\\\\" : "\\\\"}}',
    ):
        resp = await client.post(
            "/v1/events", data=raw, headers={**ws.headers, "Content-Type": "application/json"}
        )
        assert resp.status == 202, (raw, await resp.text())

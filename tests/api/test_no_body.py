"""Endpoints that take no body accept none (whatever the content type) or `{}`, and refuse any
other body with the usual 400/415 before they change anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import Workspace

JSON = "application/json"

# (body, content type, status, code, field paths named in `errors`)
REFUSED: list[tuple[bytes, str | None, int, str, list[str]]] = [
    (b'{"force": true}', JSON, 400, "validation_error", ["body.force"]),
    (b'{"a": 1, "b": null}', JSON, 400, "validation_error", ["body.a", "body.b"]),
    (b"[]", JSON, 400, "validation_error", ["body"]),
    (b"null", JSON, 400, "validation_error", ["body"]),
    (b'"{}"', JSON, 400, "validation_error", ["body"]),
    (b"0", JSON, 400, "validation_error", ["body"]),
    (b"{", JSON, 400, "invalid_json", []),
    (b" ", JSON, 400, "invalid_json", []),
    (b'{"a": 1, "a": 1}', JSON, 400, "invalid_json", []),
    (b"{}", "text/plain", 415, "unsupported_media_type", []),
    (b"force=1", "application/x-www-form-urlencoded", 415, "unsupported_media_type", []),
    (b"\x00\x01", "application/octet-stream", 415, "unsupported_media_type", []),
]

# (body, content type): nothing, or an empty object.
ACCEPTED: list[tuple[bytes | None, str | None]] = [
    (None, None),
    (b"", "text/plain"),
    (b"", JSON),
    (b"{}", JSON),
    (b" { }\n", "application/json; charset=utf-8"),
]


@dataclass
class Hook:
    id: str
    secret: str
    delivery: str


async def make_hook(client: TestClient[Any, Any], ws: Workspace, db: Database) -> Hook:
    resp = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["contact.updated"]},
        headers=ws.headers,
    )
    created = await resp.json()
    test = await client.post(f"/v1/webhooks/{created['id']}/test", headers=ws.headers)
    delivery = (await test.json())["id"]
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE deliveries SET status = 'failed', next_attempt_at = NULL, attempts = 3, "
            "last_error = 'HTTP 500'"
        )
    return Hook(created["id"], created["secret"], delivery)


async def state(db: Database) -> list[Any]:
    """Everything the four endpoints could change."""
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT w.id, w.secret, w.previous_secret, w.deleted_at, "
            "(SELECT count(*) FROM events) AS events, "
            "(SELECT array_agg((d.id, d.status, d.next_attempt_at, d.attempts)::text "
            " ORDER BY d.id) FROM deliveries d) AS deliveries "
            "FROM webhooks w ORDER BY w.id"
        )
    return [tuple(r) for r in rows]


ENDPOINTS = ["test", "retry", "rotate secret", "delete"]


def call(hook: Hook, endpoint: str) -> tuple[str, str, int]:
    """(method, path, success status) of one of the four endpoints that take no body."""
    base = f"/v1/webhooks/{hook.id}"
    return {
        "test": ("POST", f"{base}/test", 202),
        "retry": ("POST", f"{base}/deliveries/{hook.delivery}/retry", 202),
        "rotate secret": ("POST", f"{base}/secret/rotate", 200),
        "delete": ("DELETE", base, 204),
    }[endpoint]


def send_headers(ws: Workspace, content_type: str | None) -> dict[str, str]:
    return {**ws.headers, **({"Content-Type": content_type} if content_type else {})}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_a_body_is_refused_and_changes_nothing(
    client: TestClient[Any, Any], ws: Workspace, db: Database, endpoint: str
) -> None:
    hook = await make_hook(client, ws, db)
    method, path, _ = call(hook, endpoint)
    before = await state(db)
    for body, content_type, status, code, paths in REFUSED:
        resp = await client.request(method, path, data=body, headers=send_headers(ws, content_type))
        assert resp.status == status, (body, await resp.text())
        error = await resp.json()
        assert error["code"] == code, (body, error)
        assert error["trace"] == resp.headers["X-Request-Id"]
        named = [e["path"] for e in error.get("errors", [])]
        assert named == paths, (body, error)
        if paths and paths != ["body"]:
            assert {e["message"] for e in error["errors"]} == {"unknown field"}
        assert await state(db) == before, body
    # No body at all, or an empty object, is the endpoint's ordinary call.
    for accepted, content_type in ACCEPTED:
        method, path, success = call(await make_hook(client, ws, db), endpoint)
        resp = await client.request(
            method, path, data=accepted, headers=send_headers(ws, content_type)
        )
        assert resp.status == success, (accepted, content_type, await resp.text())


async def test_reading_endpoints_refuse_a_body_too(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """GET takes no body either: the same rule, so a client never believes a body did
    something (a filter sent as JSON instead of in the query string). Routes without a key
    check it at once; the others after the key, so a caller without one is 401 whatever it
    sends."""
    hook = await make_hook(client, ws, db)
    keyed = ["/v1/messages", "/v1/webhooks", f"/v1/webhooks/{hook.id}",
             f"/v1/webhooks/{hook.id}/deliveries", "/v1/conversations",
             f"/v1/webhooks/{hook.id}/secret"]  # fmt: skip
    for path in [*keyed, "/healthz", "/readyz", "/v1/openapi.json"]:
        refused = await client.get(
            path, data=b'{"status": "failed"}', headers=send_headers(ws, JSON)
        )
        assert refused.status == 400, path
        assert (await refused.json())["errors"] == [
            {"path": "body.status", "message": "unknown field"}
        ]
        fine = await client.get(path, data=b"{}", headers=send_headers(ws, JSON))
        assert fine.status == 200, path
    for path in keyed:
        anonymous = await client.get(
            path, data=b'{"status": "failed"}', headers={"Content-Type": JSON}
        )
        assert anonymous.status == 401, path

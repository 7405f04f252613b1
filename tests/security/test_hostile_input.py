"""What generators miss: each hostile body gets the one error shape and changes nothing."""

from __future__ import annotations

import io
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace


async def counts(db: Database) -> tuple[int, int, int]:
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM webhooks) w, (SELECT count(*) FROM messages) m, "
            "(SELECT count(*) FROM events) e"
        )
    assert row is not None
    return row["w"], row["m"], row["e"]


def is_error(body: Any, status: int, code: str) -> bool:
    return (
        body.get("status") == status
        and body.get("code") == code
        and {"title", "message", "trace"} <= set(body)
    )


async def test_hostile_bodies(client: TestClient[Any, Any], ws: Workspace, db: Database) -> None:
    before = await counts(db)
    json_type = {**ws.headers, "Content-Type": "application/json"}
    deep = b'{"url": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    hook = b'{"url": "https://x.example.com/", "events": ["call.missed"]'
    cases: list[tuple[str, bytes, dict[str, str], int, str]] = [
        ("/v1/webhooks", deep, json_type, 400, "validation_error"),
        ("/v1/webhooks", b'{"a": ' * 900 + b"1" + b"}" * 900, json_type, 400, "validation_error"),
        ("/v1/webhooks", hook + b', "name": "a", "name": "b"}', json_type, 400, "invalid_json"),
        ("/v1/webhooks", hook + b', "name": "\\u0000"}', json_type, 400, "validation_error"),
        ("/v1/webhooks", hook + b', "name": "' + b"n" * 10_000 + b'"}', json_type, 400,
         "validation_error"),
        ("/v1/webhooks", hook + b', "name": 12}', json_type, 400, "validation_error"),
        ("/v1/webhooks", hook + b', "maxConcurrency": "5"}', json_type, 400, "validation_error"),
        ("/v1/webhooks", hook + b', "maxConcurrency": 1e400}', json_type, 400,
         "validation_error"),
        ("/v1/webhooks", hook + b', "maxConcurrency": 99999999999999999999999}', json_type, 400,
         "validation_error"),
        ("/v1/webhooks", b'\xc3\x28', json_type, 400, "invalid_json"),
        ("/v1/webhooks", hook + b"}", {**ws.headers, "Content-Type": "text/plain"}, 415,
         "unsupported_media_type"),
        ("/v1/webhooks", hook + b"}", {**ws.headers, "Content-Type": "multipart/form-data"}, 415,
         "unsupported_media_type"),
        ("/v1/webhooks", b"null", json_type, 400, "validation_error"),
        ("/v1/messages", b'{"from": 15555550100, "to": "+15555550123", "text": "x"}', json_type,
         400, "validation_error"),
        ("/v1/messages", b'{"from": ["x"], "to": {"a": 1}, "text": true}', json_type, 400,
         "validation_error"),
        ("/v1/events", b'{"type": "contact.updated", "data": {"id": "' + b"i" * 2_000_000 + b'"}}',
         json_type, 413, "payload_too_large"),
    ]  # fmt: skip
    for path, body, headers, status, code in cases:
        resp = await client.post(path, data=io.BytesIO(body), headers=headers)
        answer = await resp.json()
        assert resp.status == status, (body[:80], answer)
        assert is_error(answer, status, code), (body[:80], answer)
    assert await counts(db) == before


async def test_unicode_names_round_trip(client: TestClient[Any, Any], ws: Workspace) -> None:
    name = "Café ✓ 日本語 🚀 \u200b"
    resp = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/ü", "events": ["call.missed"], "name": name},
        headers=ws.headers,
    )
    assert resp.status == 201
    hook = await resp.json()
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["name"] == name


async def test_ids_of_the_wrong_shape_are_404(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.post(
        "/v1/webhooks", json={"url": "https://h.example.com/", "events": ["call.missed"]},
        headers=ws.headers,
    )  # fmt: skip
    hook = await resp.json()
    msg = await client.post(
        "/v1/messages", json={"from": ws.number, "to": "+15555550123", "text": "x"},
        headers=ws.headers,
    )  # fmt: skip
    message_id = (await msg.json())["id"]
    for path in (
        f"/v1/webhooks/{message_id}",  # a message id where a webhook id belongs
        f"/v1/messages/{hook['id']}",
        f"/v1/conversations/{message_id}",
        f"/v1/webhooks/{hook['id']}/deliveries/{message_id}",
        "/v1/webhooks/" + "W" * 5000,
        "/v1/webhooks/%F0%9F%9A%80",
        "/v1/messages/%00",
    ):
        resp = await client.get(path, headers=ws.headers)
        assert resp.status in (400, 404), path
        assert (await resp.json())["code"] in ("not_found", "validation_error")


async def test_errors_never_echo_keys_or_secrets(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    resp = await client.post(
        "/v1/webhooks", json={"url": "https://h.example.com/", "events": ["call.missed"]},
        headers=ws.headers,
    )  # fmt: skip
    hook = await resp.json()
    other = await make_workspace()
    wrong = "dk_" + "z" * 43
    for headers in ({"Authorization": f"Bearer {wrong}"}, other.headers):
        for method, path in (("GET", f"/v1/webhooks/{hook['id']}/secret"),
                             ("POST", f"/v1/webhooks/{hook['id']}/secret/rotate")):  # fmt: skip
            answer = await client.request(method, path, headers=headers)
            text = await answer.text()
            assert answer.status in (401, 404)
            for secret in (hook["secret"], wrong, other.key, ws.key):
                assert secret not in text

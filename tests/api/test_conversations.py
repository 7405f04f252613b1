"""Conversations: threads made by messages and calls, folders, filters."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

CONTACT = "+15555550777"


async def list_conversations(client: TestClient[Any, Any], ws: Workspace, query: str = "") -> Any:
    resp = await client.get(f"/v1/conversations?{query}", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["data"]


async def set_status(client: TestClient[Any, Any], ws: Workspace, cid: str, status: Any) -> Any:
    return await client.post(
        f"/v1/conversations/{cid}/status", json={"status": status}, headers=ws.headers
    )


async def test_sending_creates_an_open_thread(client: TestClient[Any, Any], ws: Workspace) -> None:
    await client.post(
        "/v1/messages",
        json={"from": ws.number, "to": CONTACT, "text": "a"},
        headers=ws.headers,
    )
    (conv,) = await list_conversations(client, ws)
    assert conv["contact"] == CONTACT
    assert conv["status"] == "open"
    assert conv["numberId"] == ws.number_id
    assert conv["lastItemKind"] == "sms_message"
    assert conv["id"].startswith("CN")
    got = await client.get(f"/v1/conversations/{conv['id']}", headers=ws.headers)
    assert (await got.json()) == conv


async def test_folders_and_the_inbox_rule(client: TestClient[Any, Any], ws: Workspace) -> None:
    await client.post(
        "/v1/inbound/messages",
        json={"from": CONTACT, "to": ws.number, "text": "a"},
        headers=ws.headers,
    )
    (conv,) = await list_conversations(client, ws)
    moved = await set_status(client, ws, conv["id"], "done")
    assert moved.status == 200
    assert (await moved.json())["status"] == "done"
    # An outgoing message leaves the folder alone.
    await client.post(
        "/v1/messages", json={"from": ws.number, "to": CONTACT, "text": "b"}, headers=ws.headers
    )
    (conv,) = await list_conversations(client, ws)
    assert conv["status"] == "done"
    assert await list_conversations(client, ws, "status=open") == []
    # An incoming call moves it back to open (inbox), as a call_log.
    resp = await client.post(
        "/v1/inbound/calls",
        json={"from": CONTACT, "to": ws.number, "status": "missed"},
        headers=ws.headers,
    )
    assert resp.status == 201
    (conv,) = await list_conversations(client, ws, "status=open")
    assert conv["lastItemKind"] == "call_log"
    again = await set_status(client, ws, conv["id"], "open")
    assert (await again.json())["status"] == "open"


async def test_bad_folder_slug_is_400_and_changes_nothing(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    await client.post(
        "/v1/messages", json={"from": ws.number, "to": CONTACT, "text": "a"}, headers=ws.headers
    )
    (conv,) = await list_conversations(client, ws)
    for bad in ("archived", "", None, 1, "OPEN"):
        resp = await set_status(client, ws, conv["id"], bad)
        assert resp.status == 400, bad
        body = await resp.json()
        assert body["code"] == "validation_error"
        assert body["errors"][0]["path"] == "body.status"
    (after,) = await list_conversations(client, ws)
    assert after["status"] == "open"


async def test_conversations_are_isolated(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    await client.post(
        "/v1/messages", json={"from": ws.number, "to": CONTACT, "text": "a"}, headers=ws.headers
    )
    (conv,) = await list_conversations(client, ws)
    assert (
        await client.get(f"/v1/conversations/{conv['id']}", headers=other.headers)
    ).status == 404
    assert (await set_status(client, other, conv["id"], "done")).status == 404
    assert await list_conversations(client, other) == []
    (still,) = await list_conversations(client, ws)
    assert still["status"] == "open"


async def test_scopes(client: TestClient[Any, Any], make_workspace: MakeWorkspace) -> None:
    reader = await make_workspace(scopes=["conversations:read"])
    missing = "CN" + "0" * 32
    assert (await set_status(client, reader, missing, "done")).status == 403
    writer = await make_workspace(scopes=["conversations:write"])
    assert (await client.get("/v1/conversations", headers=writer.headers)).status == 403
    assert (await set_status(client, writer, missing, "done")).status == 404


async def test_inbound_calls(client: TestClient[Any, Any], ws: Workspace, db: Database) -> None:
    for status in ("ringing", "answered", "completed", "missed", "forwarded"):
        resp = await client.post(
            "/v1/inbound/calls",
            json={"from": CONTACT, "to": ws.number, "status": status, "durationSeconds": 3},
            headers=ws.headers,
        )
        assert resp.status == 201
        call = await resp.json()
        assert call["id"].startswith("AC") and call["status"] == status
    bad = await client.post(
        "/v1/inbound/calls",
        json={"from": CONTACT, "to": ws.number, "status": "exploded"},
        headers=ws.headers,
    )
    assert bad.status == 400
    negative = await client.post(
        "/v1/inbound/calls",
        json={"from": CONTACT, "to": ws.number, "status": "missed", "durationSeconds": -1},
        headers=ws.headers,
    )
    assert negative.status == 400
    async with db.acquire() as conn:
        types = [r["type"] for r in await conn.fetch("SELECT type FROM events ORDER BY type")]
    assert types == [
        "call.answered",
        "call.completed",
        "call.forwarded",
        "call.missed",
        "call.ringing",
    ]

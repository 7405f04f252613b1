"""Messages: send, read, list with filters; the sandbox carrier; inbound messages."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.api.framework.context import Services
from dispatcher.carrier import SandboxCarrier
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


async def send(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"from": ws.number, "to": "+15555550123", "text": "hello", **fields}
    return await client.post("/v1/messages", json=body, headers=ws.headers)


async def test_send_message_is_accepted_and_queued(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    resp = await send(client, ws)
    assert resp.status == 202
    msg = await resp.json()
    assert msg["id"].startswith("MS") and "." not in msg["id"]
    assert msg["direction"] == "outgoing"
    assert msg["status"] == "queued"
    assert msg["numberId"] == ws.number_id
    assert msg["media"] == []
    assert msg["from"] == ws.number and msg["to"] == "+15555550123"
    assert ISO_Z.match(msg["createdAt"])
    got = await client.get(f"/v1/messages/{msg['id']}", headers=ws.headers)
    assert got.status == 200
    assert (await got.json()) == msg


async def test_send_from_number_id(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await send(client, ws, **{"from": ws.number_id})
    assert resp.status == 202
    assert (await resp.json())["from"] == ws.number


async def test_send_validation(client: TestClient[Any, Any], ws: Workspace) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"to": "5555550123"}, "body.to"),
        ({"to": "+0555"}, "body.to"),
        ({"text": ""}, "body.text"),
        ({"text": "   "}, "body.text"),
        ({"text": "x" * 1601}, "body.text"),
        ({"text": 5}, "body.text"),
        ({"from": "+15550000000"}, "body.from"),
    ]
    for fields, path in cases:
        resp = await send(client, ws, **fields)
        assert resp.status == 400, fields
        body = await resp.json()
        assert body["code"] == "validation_error"
        assert path in [e["path"] for e in body["errors"]], (fields, body)
    missing = await client.post("/v1/messages", json={"text": "x"}, headers=ws.headers)
    paths = {e["path"] for e in (await missing.json())["errors"]}
    assert {"body.from", "body.to"} <= paths
    listed = await (await client.get("/v1/messages", headers=ws.headers)).json()
    assert listed["data"] == []


async def test_text_of_exactly_1600_characters_is_fine(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    assert (await send(client, ws, text="é" * 1600)).status == 202


async def test_another_workspaces_number_cannot_send(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    resp = await send(client, ws, **{"from": other.number})
    assert resp.status == 400
    resp = await send(client, ws, **{"from": other.number_id})
    assert resp.status == 400


async def test_messages_are_isolated_between_workspaces(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    msg = await (await send(client, ws)).json()
    resp = await client.get(f"/v1/messages/{msg['id']}", headers=other.headers)
    assert resp.status == 404
    assert (await resp.json())["code"] == "not_found"
    listed = await (await client.get("/v1/messages", headers=other.headers)).json()
    assert listed["data"] == []


async def test_unknown_message_is_404(client: TestClient[Any, Any], ws: Workspace) -> None:
    for message_id in ("MS" + "0" * 32, "nope", "CN" + "0" * 32):
        resp = await client.get(f"/v1/messages/{message_id}", headers=ws.headers)
        assert resp.status == 404


async def test_list_filters(client: TestClient[Any, Any], ws: Workspace) -> None:
    await send(client, ws, to="+15555550001")
    await send(client, ws, to="+15555550002")
    inbound = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550001", "to": ws.number, "text": "reply"},
        headers=ws.headers,
    )
    assert inbound.status == 201

    async def ids_for(query: str) -> list[str]:
        resp = await client.get(f"/v1/messages?{query}", headers=ws.headers)
        assert resp.status == 200, await resp.text()
        return [m["text"] + ":" + m["direction"] for m in (await resp.json())["data"]]

    assert await ids_for("contact=%2B15555550001") == ["reply:incoming", "hello:outgoing"]
    assert await ids_for("direction=incoming") == ["reply:incoming"]
    assert len(await ids_for(f"numberId={ws.number_id}")) == 3
    for bad in ("direction=sideways", "numberId=PNxyz", "contact=123", "limit=0", "limit=101",
                "limit=abc"):  # fmt: skip
        resp = await client.get(f"/v1/messages?{bad}", headers=ws.headers)
        assert resp.status == 400, bad
        assert (await resp.json())["code"] == "validation_error"


async def test_sandbox_carrier_moves_messages_along(
    client: TestClient[Any, Any], ws: Workspace, services: Services, db: Database
) -> None:
    ok = await (await send(client, ws, to="+15555550123")).json()
    bad = await (await send(client, ws, to="+15005550001")).json()
    carrier = SandboxCarrier(db, services.clock, delay=0.0)
    assert await carrier.advance() == 2

    async def status(message_id: str) -> str:
        resp = await client.get(f"/v1/messages/{message_id}", headers=ws.headers)
        return str((await resp.json())["status"])

    assert await status(ok["id"]) == "sent"
    assert await status(bad["id"]) == "sent"
    assert await carrier.advance() == 2
    assert await status(ok["id"]) == "delivered"
    assert await status(bad["id"]) == "undelivered"
    assert await carrier.advance() == 0
    async with db.acquire() as conn:
        events = await conn.fetch("SELECT type, payload FROM events ORDER BY created_at, type")
    assert sorted(e["type"] for e in events) == ["message.delivered", "message.failed"]


async def test_sandbox_delay_is_respected(
    client: TestClient[Any, Any], ws: Workspace, services: Services, db: Database
) -> None:
    from tests.clock import FakeClock

    clock = services.clock
    assert isinstance(clock, FakeClock)
    await send(client, ws)
    carrier = SandboxCarrier(db, clock, delay=60.0)
    assert await carrier.advance() == 1  # queued -> sent, now
    assert await carrier.advance() == 0  # delivered only after the delay
    clock.advance(61)
    assert await carrier.advance() == 1


async def test_inbound_message(client: TestClient[Any, Any], ws: Workspace, db: Database) -> None:
    resp = await client.post(
        "/v1/inbound/messages",
        json={
            "from": "+15555550777",
            "to": ws.number,
            "text": "hi there",
            "media": [{"contentType": "image/png", "url": "https://example.com/a.png"}],
        },
        headers=ws.headers,
    )
    assert resp.status == 201
    msg = await resp.json()
    assert msg["direction"] == "incoming" and msg["status"] == "received"
    assert msg["media"] == [{"contentType": "image/png", "url": "https://example.com/a.png"}]
    async with db.acquire() as conn:
        event = await conn.fetchrow("SELECT type, number_id, payload FROM events")
    assert event is not None
    assert event["type"] == "message.received"
    assert event["number_id"] == ws.number_id
    assert f'"id":"{msg["id"]}"' in event["payload"]


async def test_inbound_to_a_foreign_number_is_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    resp = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550777", "to": "+15550000000", "text": "x"},
        headers=ws.headers,
    )
    assert resp.status == 400
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        assert await conn.fetchval("SELECT count(*) FROM messages") == 0


async def test_inbound_needs_ingest_scope(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace
) -> None:
    ws = await make_workspace(scopes=["messages:write", "messages:read"])
    resp = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550777", "to": ws.number, "text": "x"},
        headers=ws.headers,
    )
    assert resp.status == 403

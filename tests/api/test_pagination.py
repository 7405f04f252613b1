"""Cursor pagination: stable under inserts, tamper-evident, bound to its filters."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.conftest import MakeWorkspace, Workspace


async def send(
    client: TestClient[Any, Any], ws: Workspace, text: str, to: str = "+15555550123"
) -> str:
    resp = await client.post(
        "/v1/messages", json={"from": ws.number, "to": to, "text": text}, headers=ws.headers
    )
    assert resp.status == 202
    return str((await resp.json())["id"])


async def page(client: TestClient[Any, Any], ws: Workspace, query: str) -> Any:
    resp = await client.get(f"/v1/messages?{query}", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_default_limit_and_shape(client: TestClient[Any, Any], ws: Workspace) -> None:
    for i in range(27):
        await send(client, ws, f"m{i}")
    first = await page(client, ws, "")
    assert len(first["data"]) == 25
    assert isinstance(first["nextCursor"], str)
    assert set(first) == {"data", "nextCursor"}
    # Newest first.
    assert first["data"][0]["text"] == "m26"


async def test_inserts_between_pages_never_shift_or_repeat(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    created = [await send(client, ws, f"m{i}") for i in range(10)]
    seen: list[str] = []
    query = "limit=3"
    n = 100
    while True:
        body = await page(client, ws, query)
        seen.extend(m["id"] for m in body["data"])
        # New rows arrive while the client pages.
        await send(client, ws, f"late{n}")
        n += 1
        if body["nextCursor"] is None:
            break
        query = f"limit=3&cursor={body['nextCursor']}"
    assert seen == list(reversed(created))
    assert len(seen) == len(set(seen))


async def test_last_page_has_null_cursor(client: TestClient[Any, Any], ws: Workspace) -> None:
    for i in range(4):
        await send(client, ws, f"m{i}")
    first = await page(client, ws, "limit=2")
    second = await page(client, ws, f"limit=2&cursor={first['nextCursor']}")
    assert len(second["data"]) == 2
    assert second["nextCursor"] is None
    exact = await page(client, ws, "limit=4")
    assert exact["nextCursor"] is None


async def test_cursor_with_other_filters_is_invalid(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for i in range(3):
        await send(client, ws, f"m{i}")
    first = await page(client, ws, "limit=1&direction=outgoing")
    cursor = first["nextCursor"]
    for query in (f"limit=1&cursor={cursor}", f"limit=1&direction=incoming&cursor={cursor}"):
        resp = await client.get(f"/v1/messages?{query}", headers=ws.headers)
        assert resp.status == 400, query
        assert (await resp.json())["code"] == "invalid_cursor"
    # Same filters: fine, even with another limit.
    ok = await client.get(
        f"/v1/messages?limit=2&direction=outgoing&cursor={cursor}", headers=ws.headers
    )
    assert ok.status == 200


async def test_tampered_and_foreign_cursors_are_invalid(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    for i in range(3):
        await send(client, ws, f"m{i}")
    cursor = (await page(client, ws, "limit=1"))["nextCursor"]
    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    for bad in (flipped, "garbage", "%%%", cursor[:10]):
        resp = await client.get(f"/v1/messages?cursor={bad}", headers=ws.headers)
        assert resp.status == 400, bad
        assert (await resp.json())["code"] == "invalid_cursor"
    other = await make_workspace()
    resp = await client.get(f"/v1/messages?cursor={cursor}", headers=other.headers)
    assert resp.status == 400
    # A messages cursor is not a conversations cursor.
    resp = await client.get(f"/v1/conversations?cursor={cursor}", headers=ws.headers)
    assert resp.status == 400


async def test_conversation_pages_are_stable_too(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    contacts = [f"+1555555{i:04d}" for i in range(7)]
    for contact in contacts:
        await send(client, ws, "x", to=contact)
    seen: list[str] = []
    query = "limit=2"
    while True:
        resp = await client.get(f"/v1/conversations?{query}", headers=ws.headers)
        body = await resp.json()
        seen.extend(c["contact"] for c in body["data"])
        await send(client, ws, "y", to=f"+1666{len(seen):07d}")
        if body["nextCursor"] is None:
            break
        query = f"limit=2&cursor={body['nextCursor']}"
    assert seen == list(reversed(contacts))

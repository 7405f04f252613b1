"""Reading the event stream: list and search, one event with where it went, its deliveries;
`events:read` (or `webhooks:read`) and one workspace's events only."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace


async def publish(
    client: TestClient[Any, Any], ws: Workspace, event_type: str, data_id: str
) -> Any:
    resp = await client.post(
        "/v1/events", json={"type": event_type, "data": {"id": data_id}}, headers=ws.headers
    )
    assert resp.status == 202
    return await resp.json()


async def subscribe(client: TestClient[Any, Any], ws: Workspace, n: int) -> list[str]:
    hooks = []
    for i in range(n):
        resp = await client.post(
            "/v1/webhooks",
            json={"url": f"https://hooks{i}.example.com/", "events": ["contact.updated"]},
            headers=ws.headers,
        )
        assert resp.status == 201
        hooks.append((await resp.json())["id"])
    return hooks


async def get(client: TestClient[Any, Any], ws: Workspace, path: str) -> Any:
    resp = await client.get(path, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_list_and_search_the_stream(
    client: TestClient[Any, Any], ws: Workspace, clock: FakeClock
) -> None:
    published = []
    for event_type, name in (
        ("contact.updated", "a"),
        ("contact.deleted", "b"),
        ("contact.updated", "c"),
    ):
        published.append(await publish(client, ws, event_type, name))
        clock.advance(60)
    hooks = await subscribe(client, ws, 1)
    # A test delivery's event is not part of the stream.
    assert (await client.post(f"/v1/webhooks/{hooks[0]}/test", headers=ws.headers)).status < 300
    listed = (await get(client, ws, "/v1/events"))["data"]
    # The envelopes as published, newest first, none expunged, with their ordering keys (none
    # here).
    assert listed == [
        {**event, "expunged": False, "orderingKey": None} for event in reversed(published)
    ]
    only = (await get(client, ws, "/v1/events?type=contact.deleted"))["data"]
    assert [e["id"] for e in only] == [published[1]["id"]]
    at = published[1]["createdAt"]
    assert [e["data"]["id"] for e in (await get(client, ws, f"/v1/events?since={at}"))["data"]] == [
        "c",
        "b",
    ]
    assert [e["data"]["id"] for e in (await get(client, ws, f"/v1/events?until={at}"))["data"]] == [
        "a"
    ]
    for bad, path in (("type=Nope!", "query.type"), ("since=today", "query.since")):
        resp = await client.get(f"/v1/events?{bad}", headers=ws.headers)
        assert resp.status == 400, bad
        assert (await resp.json())["errors"][0]["path"] == path
    page = await get(client, ws, "/v1/events?limit=1")
    resp = await client.get(
        f"/v1/events?limit=1&type=contact.updated&cursor={page['nextCursor']}", headers=ws.headers
    )
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_cursor"


async def test_one_event_and_where_it_went(client: TestClient[Any, Any], ws: Workspace) -> None:
    hooks = await subscribe(client, ws, 3)
    event = await publish(client, ws, "contact.updated", "x")
    got = await get(client, ws, f"/v1/events/{event['id']}")
    assert {k: got[k] for k in event} == event
    assert got["deliveryCount"] == 3
    assert sorted(d["webhookId"] for d in got["deliveries"]) == sorted(hooks)
    assert {(d["status"], d["attempts"]) for d in got["deliveries"]} == {("pending", 0)}
    pages, cursor = [], None
    for _ in range(5):
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = await get(client, ws, f"/v1/events/{event['id']}/deliveries?{query}")
        pages += page["data"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(d["webhookId"] for d in pages) == sorted(hooks)
    assert all(d["payload"] == event for d in pages)
    missing = f"/v1/events/EV{'0' * 32}"
    assert (await client.get(missing, headers=ws.headers)).status == 404
    assert (await client.get(f"{missing}/deliveries", headers=ws.headers)).status == 404


async def test_scopes_and_workspaces(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    event = await publish(client, ws, "contact.updated", "x")
    paths = ["/v1/events", f"/v1/events/{event['id']}", f"/v1/events/{event['id']}/deliveries"]
    reader = await make_workspace(scopes=["events:read"])
    hooks_reader = await make_workspace(scopes=["webhooks:read"])
    writer = await make_workspace(scopes=["events:write", "webhooks:write"])
    for path in paths:
        assert (await client.get(path, headers=writer.headers)).status == 403
        assert (await client.get(path)).status == 401
        for other in (reader, hooks_reader):
            # Another workspace's event is not there; its own list is empty.
            resp = await client.get(path, headers=other.headers)
            assert resp.status == (200 if path == "/v1/events" else 404), path
    assert (await get(client, reader, "/v1/events"))["data"] == []


async def test_an_event_shows_its_first_100_deliveries_and_counts_all(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hooks = await subscribe(client, ws, 101)
    event = await publish(client, ws, "contact.updated", "many")
    got = await get(client, ws, f"/v1/events/{event['id']}")
    assert got["deliveryCount"] == 101
    assert len(got["deliveries"]) == 100
    assert {d["webhookId"] for d in got["deliveries"]} < set(hooks)

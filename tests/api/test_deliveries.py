"""Deliveries through the API: list and filters, test, retry, recover."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace


async def subscribe(client: TestClient[Any, Any], ws: Workspace, events: list[str]) -> str:
    resp = await client.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/", "events": events},
        headers=ws.headers,
    )  # fmt: skip
    return str((await resp.json())["id"])


async def publish(
    client: TestClient[Any, Any], ws: Workspace, event_type: str, data_id: str
) -> None:
    resp = await client.post(
        "/v1/events", json={"type": event_type, "data": {"id": data_id}}, headers=ws.headers
    )
    assert resp.status == 202


async def listing(client: TestClient[Any, Any], ws: Workspace, hook: str, query: str = "") -> Any:
    resp = await client.get(f"/v1/webhooks/{hook}/deliveries?{query}", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["data"]


async def test_list_filters(client: TestClient[Any, Any], ws: Workspace, db: Database) -> None:
    hook = await subscribe(client, ws, ["contact.updated", "contact.deleted"])
    await publish(client, ws, "contact.updated", "a")
    await publish(client, ws, "contact.deleted", "b")
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE deliveries SET status = 'failed', next_attempt_at = NULL "
            "WHERE event_type = 'contact.deleted'"
        )
    assert [d["event"] for d in await listing(client, ws, hook)] == [
        "contact.deleted",
        "contact.updated",
    ]
    assert [d["event"] for d in await listing(client, ws, hook, "status=failed")] == [
        "contact.deleted"
    ]
    assert [d["event"] for d in await listing(client, ws, hook, "event=contact.updated")] == [
        "contact.updated"
    ]
    assert await listing(client, ws, hook, "status=delivered") == []
    for bad in ("status=gone", "event=nope"):
        resp = await client.get(f"/v1/webhooks/{hook}/deliveries?{bad}", headers=ws.headers)
        assert resp.status == 400
    missing = await client.get(f"/v1/webhooks/WH{'0' * 32}/deliveries", headers=ws.headers)
    assert missing.status == 404


async def test_test_delivery(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await subscribe(client, ws, ["call.missed"])
    resp = await client.post(f"/v1/webhooks/{hook}/test", headers=ws.headers)
    assert resp.status == 202
    delivery = await resp.json()
    assert delivery["status"] == "pending"
    assert delivery["event"] == "webhook.test"
    assert delivery["payload"]["type"] == "webhook.test"
    assert delivery["payload"]["data"] == {"id": hook}
    got = await client.get(f"/v1/webhooks/{hook}/deliveries/{delivery['id']}", headers=ws.headers)
    assert (await got.json()) == delivery
    # Allowed on a disabled webhook, to check an endpoint before enabling it.
    await client.patch(f"/v1/webhooks/{hook}", json={"enabled": False}, headers=ws.headers)
    again = await client.post(f"/v1/webhooks/{hook}/test", headers=ws.headers)
    assert again.status == 202
    assert (await again.json())["status"] == "pending"
    missing = await client.post(f"/v1/webhooks/WH{'0' * 32}/test", headers=ws.headers)
    assert missing.status == 404


async def test_retry(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    hook = await subscribe(client, ws, ["contact.updated"])
    await publish(client, ws, "contact.updated", "a")
    (delivery,) = await listing(client, ws, hook)
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE deliveries SET status = 'failed', next_attempt_at = NULL, attempts = 8, "
            "last_error = 'HTTP 500' WHERE id = $1",
            delivery["id"],
        )
    resp = await client.post(
        f"/v1/webhooks/{hook}/deliveries/{delivery['id']}/retry", headers=ws.headers
    )
    assert resp.status == 202
    retried = await resp.json()
    assert retried["id"] == delivery["id"]
    assert retried["status"] == "pending"
    assert retried["nextAttemptAt"] is not None
    assert retried["lastError"] == "HTTP 500"  # kept while retrying
    assert retried["payload"] == delivery["payload"]
    missing = await client.post(
        f"/v1/webhooks/{hook}/deliveries/WD{'0' * 32}/retry", headers=ws.headers
    )
    assert missing.status == 404
    await client.patch(f"/v1/webhooks/{hook}", json={"enabled": False}, headers=ws.headers)
    refused = await client.post(
        f"/v1/webhooks/{hook}/deliveries/{delivery['id']}/retry", headers=ws.headers
    )
    assert refused.status == 409
    body = await refused.json()
    assert body["code"] == "conflict" and "enable" in body["message"]


async def test_recover(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    hook = await subscribe(client, ws, ["contact.updated"])
    since = isoformat(clock.now() - timedelta(seconds=1))
    await publish(client, ws, "contact.updated", "before")
    await client.patch(f"/v1/webhooks/{hook}", json={"enabled": False}, headers=ws.headers)
    await publish(client, ws, "contact.updated", "missed-1")
    await publish(client, ws, "contact.updated", "missed-2")
    await publish(client, ws, "contact.deleted", "not-heard")
    # While disabled, recover is refused.
    refused = await client.post(
        f"/v1/webhooks/{hook}/recover", json={"since": since}, headers=ws.headers
    )
    assert refused.status == 409
    await client.patch(f"/v1/webhooks/{hook}", json={"enabled": True}, headers=ws.headers)
    resp = await client.post(
        f"/v1/webhooks/{hook}/recover", json={"since": since}, headers=ws.headers
    )
    assert resp.status == 202
    assert (await resp.json()) == {"queued": 3}
    rows = await listing(client, ws, hook)
    assert sorted(d["payload"]["data"]["id"] for d in rows) == ["before", "missed-1", "missed-2"]
    assert {d["status"] for d in rows} == {"pending"}
    # Nothing left to recover in that window.
    again = await client.post(
        f"/v1/webhooks/{hook}/recover", json={"since": since}, headers=ws.headers
    )
    assert (await again.json()) == {"queued": 0}


async def test_recover_validation(
    client: TestClient[Any, Any], ws: Workspace, clock: FakeClock
) -> None:
    hook = await subscribe(client, ws, ["contact.updated"])
    now = clock.now()
    cases: list[Any] = [
        {"since": isoformat(now - timedelta(days=15))},
        {"since": isoformat(now), "until": isoformat(now - timedelta(hours=1))},
        {"since": "yesterday"},
        {"since": "2026-11-01T00:00:00"},  # no zone
        {},
    ]
    for body in cases:
        resp = await client.post(f"/v1/webhooks/{hook}/recover", json=body, headers=ws.headers)
        assert resp.status == 400, body
        assert (await resp.json())["code"] == "validation_error"


async def test_search_by_time_and_event(
    client: TestClient[Any, Any], ws: Workspace, clock: FakeClock
) -> None:
    """`since` (inclusive) and `until` (exclusive) on createdAt, and `eventId`; cursors are
    bound to them."""
    hook = await subscribe(client, ws, ["contact.updated"])
    events = []
    for name in ("first", "second", "third"):
        resp = await client.post(
            "/v1/events",
            json={"type": "contact.updated", "data": {"id": name}},
            headers=ws.headers,
        )
        events.append(await resp.json())
        clock.advance(60)
    first, second, third = events
    at = second["createdAt"]

    def data_ids(rows: Any) -> list[str]:
        return [row["payload"]["data"]["id"] for row in rows]

    assert data_ids(await listing(client, ws, hook, f"since={at}")) == ["third", "second"]
    assert data_ids(await listing(client, ws, hook, f"until={at}")) == ["first"]
    assert data_ids(await listing(client, ws, hook, f"since={at}&until={at}")) == []
    assert data_ids(await listing(client, ws, hook, f"eventId={third['id']}")) == ["third"]
    assert await listing(client, ws, hook, f"eventId=EV{'0' * 32}") == []
    for bad, path in (
        ("eventId=nope", "query.eventId"),
        ("since=yesterday", "query.since"),
        ("until=2026-11-21", "query.until"),
        (f"since={third['createdAt']}&until={first['createdAt']}", "query.until"),
    ):
        resp = await client.get(f"/v1/webhooks/{hook}/deliveries?{bad}", headers=ws.headers)
        assert resp.status == 400, bad
        assert (await resp.json())["errors"][0]["path"] == path
    page = await client.get(
        f"/v1/webhooks/{hook}/deliveries?limit=1&since={first['createdAt']}", headers=ws.headers
    )
    cursor = (await page.json())["nextCursor"]
    assert cursor
    moved = await client.get(
        f"/v1/webhooks/{hook}/deliveries?limit=1&since={at}&cursor={cursor}", headers=ws.headers
    )
    assert moved.status == 400
    assert (await moved.json())["code"] == "invalid_cursor"

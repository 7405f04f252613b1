"""Payload-filter steps the API tests share: subscribe and publish through the API, read back
which events a webhook got a delivery of, ask the filter-test route."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import Workspace

URL = "https://hooks.example.com/in"


async def subscribe(
    client: TestClient[Any, Any], ws: Workspace, events: list[str] | None = None, **fields: Any
) -> Any:
    body = {"url": URL, "events": events or ["contact.updated"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def publish(client: TestClient[Any, Any], ws: Workspace, data: dict[str, Any]) -> str:
    resp = await client.post(
        "/v1/events", json={"type": "contact.updated", "data": data}, headers=ws.headers
    )
    assert resp.status == 202, await resp.text()
    return str((await resp.json())["id"])


async def delivered_ids(db: Database, hook_id: str) -> list[str]:
    """The `data.id` of each event the webhook has a delivery of, sorted."""
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT e.payload::jsonb -> 'data' ->> 'id' AS id FROM deliveries d "
            "JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at "
            "WHERE d.webhook_id = $1 ORDER BY 1",
            hook_id,
        )
    return [r["id"] for r in rows]


async def filter_test(client: TestClient[Any, Any], ws: Workspace, hook_id: str, body: Any) -> Any:
    return await client.post(f"/v1/webhooks/{hook_id}/filter/test", json=body, headers=ws.headers)

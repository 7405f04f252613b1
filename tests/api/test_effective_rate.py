"""The webhook's stats answer says its effective rate (flow control, docs/delivery.md): null
when unrestricted, its rateLimit, or the rate the receiver's 429 answers adapted; a PATCH of
rateLimit starts flow control over. (The engine's side: tests/engine/test_flow_control.py.)"""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import Workspace
from tests.engine.helpers import get_json

URL = "https://hooks.example.com/in"


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["contact.updated"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def effective(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> Any:
    return (await get_json(client, ws, f"/v1/webhooks/{hook_id}/stats"))["effectiveRateLimit"]


async def adapt(db: Database, hook_id: str, rate: float, ceiling: float) -> None:
    """What the engine's record does on a 429 (store/flow_control.py), written directly."""
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE webhooks SET adapted_rate = $2, adapted_ceiling = $3, adapted_at = now(), "
            "slowed_at = now() WHERE id = $1",
            hook_id,
            rate,
            ceiling,
        )
        await conn.execute(
            "INSERT INTO webhook_rates (webhook_id) VALUES ($1) ON CONFLICT DO NOTHING", hook_id
        )


async def test_the_stats_say_the_effective_rate(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    plain = await create(client, ws)
    limited = await create(client, ws, rateLimit=40)
    assert await effective(client, ws, plain["id"]) is None  # unrestricted
    assert await effective(client, ws, limited["id"]) == 40

    await adapt(db, limited["id"], 20.0, 40.0)
    await adapt(db, plain["id"], 2.5, 5.0)
    assert await effective(client, ws, limited["id"]) == 20.0
    assert await effective(client, ws, plain["id"]) == 2.5

    # A rate limit set starts over: the configured one is in force at once.
    resp = await client.patch(
        f"/v1/webhooks/{limited['id']}", json={"rateLimit": 30}, headers=ws.headers
    )
    assert resp.status == 200, await resp.text()
    assert await effective(client, ws, limited["id"]) == 30
    # A rate limit cleared takes the bucket and the adapted rate with it.
    resp = await client.patch(
        f"/v1/webhooks/{limited['id']}", json={"rateLimit": None}, headers=ws.headers
    )
    assert resp.status == 200, await resp.text()
    assert await effective(client, ws, limited["id"]) is None
    async with db.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM webhook_rates WHERE webhook_id = $1", limited["id"]
        ) == 0  # fmt: skip


async def test_the_field_is_in_the_openapi_document(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/v1/openapi.json")
    document = await resp.json()
    schema = document["components"]["schemas"]["WebhookStats"]
    assert "effectiveRateLimit" in schema["properties"]
    assert "effectiveRateLimit" in schema["required"]

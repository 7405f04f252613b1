"""Small steps the engine tests share: subscribe, publish, read a delivery back."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.engine.worker import Engine
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.receiver import Receiver


async def subscribe(
    client: TestClient[Any, Any], ws: Workspace, url: str, **fields: Any
) -> dict[str, Any]:
    body = {"url": url, "events": ["contact.updated"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    hook: dict[str, Any] = await resp.json()
    return hook


async def publish(client: TestClient[Any, Any], ws: Workspace, data_id: str = "CT1") -> Any:
    resp = await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": data_id}}, headers=ws.headers
    )
    assert resp.status == 202, await resp.text()
    return await resp.json()


async def deliveries(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> list[Any]:
    resp = await client.get(f"/v1/webhooks/{hook_id}/deliveries?limit=100", headers=ws.headers)
    assert resp.status == 200
    data: list[Any] = (await resp.json())["data"]
    return data


async def only_delivery(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> Any:
    (delivery,) = await deliveries(client, ws, hook_id)
    return delivery


async def attempted(
    client: TestClient[Any, Any],
    ws: Workspace,
    hook_id: str,
    attempts: int = 1,
    engine: Engine | None = None,
) -> Any:
    """The webhook's one delivery once `attempts` attempts are recorded (poking the engine
    on each look, when given, so a retry made due by the clock is claimed at once)."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        if engine is not None:
            engine.poke()
        seen.update(await only_delivery(client, ws, hook_id))
        return bool(seen["attempts"] >= attempts)

    await wait_for(reached, message=f"{attempts} attempt(s) recorded")
    return seen


async def recorded_attempts(db: Database) -> int:
    """Attempts written to the database (a request seen by the receiver may not be yet)."""
    async with db.acquire() as conn:
        return int(await conn.fetchval("SELECT coalesce(sum(attempts), 0) FROM deliveries"))


async def wait_recorded(db: Database, n: int) -> None:
    async def enough() -> bool:
        return await recorded_attempts(db) >= n

    await wait_for(enough, message=f"{n} attempts recorded")


async def get_json(client: TestClient[Any, Any], ws: Workspace, path: str) -> Any:
    resp = await client.get(path, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def bulk_publish(db: Database, ws: Workspace, n: int) -> None:
    """n events through the outbox function, in one transaction (fast set-up)."""
    async with db.transaction() as conn:
        await conn.execute(
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', 'CT' || g)) FROM generate_series(1, $2) g",
            ws.id,
            n,
        )


def slow_ok(seconds: float) -> Any:
    """Answer 200 after `seconds` (a receiver that takes a while: requests overlap)."""

    async def respond(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(status=200)

    return respond


async def webhooks_for(db: Database, ws: Workspace, receiver: Receiver, n: int) -> None:
    async with db.acquire() as conn:
        await conn.execute(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret, max_concurrency) "
            "SELECT 'WH' || g, $1, $2 || g, '{contact.updated}', "
            "'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 20 FROM generate_series(1, $3) g",
            ws.id,
            receiver.url("/h"),
            n,
        )


async def delivered_count(db: Database) -> int:
    async with db.acquire() as conn:
        return int(
            await conn.fetchval("SELECT count(*) FROM deliveries WHERE status = 'delivered'")
        )

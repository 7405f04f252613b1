"""What the conformance tests do with each server: subscribe webhooks whose secrets the
receiver is told, deliver through the real engine, and read back what was recorded (the
attempt log, through the API)."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conformance.servers import Receiver
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import get_json, subscribe


async def signed_webhook(
    client: TestClient[Any, Any], ws: Workspace, url: str, checker: Receiver, **fields: Any
) -> dict[str, Any]:
    """A webhook to `url`, its signing secret given to `checker` (the receiver that verifies
    it) for the URL's path."""
    hook = await subscribe(client, ws, url, **fields)
    path = "/" + url.split("/", 3)[3]
    await checker.secret(path, hook["secret"])
    return hook


async def delivered(db: Database, hook_id: str) -> int:
    async with db.acquire() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'delivered'",
                hook_id,
            )
        )


async def wait_delivered(db: Database, hook_id: str, n: int) -> None:
    async def all_of_them() -> bool:
        return await delivered(db, hook_id) >= n

    await wait_for(all_of_them, within=60, message=f"{n} deliveries to {hook_id} delivered")


async def attempts(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> list[Any]:
    """The webhook's attempts as the API lists them, newest first (at most 100)."""
    page = await get_json(client, ws, f"/v1/webhooks/{hook_id}/attempts?limit=100")
    found: list[Any] = page["data"]
    return found


async def first_attempt(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> Any:
    """The webhook's first attempt, once it is recorded."""
    seen: list[Any] = []

    async def recorded() -> bool:
        seen[:] = await attempts(client, ws, hook_id)
        return bool(seen)

    await wait_for(recorded, message=f"an attempt to {hook_id} recorded")
    return seen[-1]


async def delivery_ids(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> set[str]:
    ids: set[str] = set()
    cursor = None
    while True:
        query = "limit=100" + (f"&cursor={cursor}" if cursor else "")
        page = await get_json(client, ws, f"/v1/webhooks/{hook_id}/deliveries?{query}")
        ids |= {d["id"] for d in page["data"]}
        cursor = page["nextCursor"]
        if cursor is None:
            return ids

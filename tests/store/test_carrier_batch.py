"""The sandbox carrier moves a whole batch in a few statements: every message takes its step,
every step that makes an event makes exactly one, with the message as of that step, fanned out
to the subscriptions that want it; a conversation's thread is updated by the send itself."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from dispatcher.api.framework.context import Services
from dispatcher.carrier import SANDBOX_FAILING_NUMBERS, SandboxCarrier
from dispatcher.store.database import Database
from tests.conftest import Workspace


async def test_a_batch_of_mixed_steps(
    client: TestClient[Any, Any], ws: Workspace, services: Services, db: Database
) -> None:
    hook = await client.post(
        "/v1/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["message.delivered", "message.failed"]},
        headers=ws.headers,
    )
    assert hook.status == 201, await hook.text()
    failing = sorted(SANDBOX_FAILING_NUMBERS)
    sent: dict[str, str] = {}
    for i in range(30):
        to = failing[i % 2] if i % 3 == 0 else f"+1555000{i:04d}"
        resp = await client.post(
            "/v1/messages",
            json={"from": ws.number, "to": to, "text": f"m{i}"},
            headers=ws.headers,
        )
        assert resp.status == 202
        sent[(await resp.json())["id"]] = "undelivered" if to in failing else "delivered"
    carrier = SandboxCarrier(db, services.clock, delay=0.0)
    assert await carrier.advance() == 30  # queued -> sent: no event
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
    assert await carrier.advance() == 30
    async with db.acquire() as conn:
        rows = await conn.fetch("SELECT id, status FROM messages")
        statuses = {row["id"]: row["status"] for row in rows}
        events = await conn.fetch("SELECT id, type, payload FROM events")
        deliveries = await conn.fetchval("SELECT count(*) FROM deliveries")
        threads = await conn.fetchval("SELECT count(*) FROM conversations")
    assert statuses == sent
    assert len(events) == 30 and deliveries == 30
    # One thread per contact: the failing numbers were written to 10 times between them.
    assert threads == 20 + len(failing)
    for event in events:
        payload = orjson.loads(event["payload"])
        assert payload["id"] == event["id"]
        message = payload["data"]
        expected = sent[message["id"]]
        assert message["status"] == expected
        assert event["type"] == (
            "message.delivered" if expected == "delivered" else "message.failed"
        )

"""Events from every door, fan-out by type and number, idempotency, the outbox function."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace


async def subscribe(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> str:
    body = {"url": "https://hooks.example.com/", "events": ["message.received"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def deliveries_of(db: Database, webhook_id: str) -> list[str]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT event_type FROM deliveries WHERE webhook_id = $1 ORDER BY event_type",
            webhook_id,
        )
    return [r["event_type"] for r in rows]


async def publish(client: TestClient[Any, Any], ws: Workspace, body: Any, **headers: str) -> Any:
    return await client.post("/v1/events", json=body, headers={**ws.headers, **headers})


async def test_publish_returns_the_envelope(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await publish(client, ws, {"type": "contact.updated", "data": {"id": "CT1", "x": [1]}})
    assert resp.status == 202
    event = await resp.json()
    assert event["id"].startswith("EV")
    assert event["type"] == "contact.updated"
    assert event["apiVersion"] == "2026-11-01"
    assert event["data"] == {"id": "CT1", "x": [1]}
    assert event["createdAt"].endswith("Z")


async def test_publish_validation(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    other = await make_workspace()
    cases: list[tuple[Any, str]] = [
        ({"type": "contact.exploded", "data": {"id": "x"}}, "contact.exploded"),
        ({"type": "webhook.test", "data": {"id": "x"}}, "webhook.test"),
        ({"type": "contact.updated", "data": {}}, "id"),
        ({"type": "contact.updated", "data": {"id": 5}}, "id"),
        ({"type": "contact.updated", "data": "x"}, "data"),
        ({"type": "contact.updated"}, "data"),
        ({"type": "contact.updated", "data": {"id": "x"}, "numberId": other.number_id}, "numberId"),
    ]
    for body, mention in cases:
        resp = await publish(client, ws, body)
        assert resp.status == 400, body
        error = await resp.json()
        assert error["code"] == "validation_error"
        assert mention in error["message"], (body, error)
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0


async def test_idempotency_key(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    hook = await subscribe(client, ws, events=["contact.updated"])
    body = {"type": "contact.updated", "data": {"id": "CT1"}}
    first = await publish(client, ws, body, **{"Idempotency-Key": "k-1"})
    second = await publish(client, ws, body, **{"Idempotency-Key": "k-1"})
    assert first.status == second.status == 202
    assert (await first.json()) == (await second.json())
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert await deliveries_of(db, hook) == ["contact.updated"]
    # Another key, or the same key after 24 hours, is a new event.
    third = await publish(client, ws, body, **{"Idempotency-Key": "k-2"})
    assert (await third.json())["id"] != (await first.json())["id"]
    clock.advance(24 * 3600 + 1)
    fourth = await publish(client, ws, body, **{"Idempotency-Key": "k-1"})
    assert (await fourth.json())["id"] != (await first.json())["id"]
    assert len(await deliveries_of(db, hook)) == 3


async def test_idempotency_keys_are_per_workspace(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    body = {"type": "contact.updated", "data": {"id": "CT1"}}
    mine = await (await publish(client, ws, body, **{"Idempotency-Key": "same"})).json()
    theirs = await (await publish(client, other, body, **{"Idempotency-Key": "same"})).json()
    assert mine["id"] != theirs["id"]


async def test_fan_out_filters(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace, db: Database
) -> None:
    ws = await make_workspace()
    second_number = "+15555557777"
    from dispatcher.store import workspaces

    second_id = await workspaces.add_number(db, ws.id, second_number)
    every = await subscribe(client, ws, events=["message.received", "call.missed"])
    only_first = await subscribe(client, ws, numberIds=[ws.number_id])
    only_second = await subscribe(client, ws, numberIds=[second_id])
    no_numbers = await subscribe(client, ws, numberIds=[])
    calls_only = await subscribe(client, ws, events=["call.missed"])
    disabled = await subscribe(client, ws)
    await client.patch(f"/v1/webhooks/{disabled}", json={"enabled": False}, headers=ws.headers)
    deleted = await subscribe(client, ws)
    await client.delete(f"/v1/webhooks/{deleted}", headers=ws.headers)
    other = await make_workspace()
    foreign = await subscribe(client, other)

    resp = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550001", "to": ws.number, "text": "hi"},
        headers=ws.headers,
    )
    assert resp.status == 201
    await client.post(
        "/v1/inbound/calls",
        json={"from": "+15555550001", "to": second_number, "status": "missed"},
        headers=ws.headers,
    )
    assert await deliveries_of(db, every) == ["call.missed", "message.received"]
    assert await deliveries_of(db, only_first) == ["message.received"]
    assert await deliveries_of(db, only_second) == []
    assert await deliveries_of(db, no_numbers) == []
    assert await deliveries_of(db, calls_only) == ["call.missed"]
    assert await deliveries_of(db, disabled) == []
    assert await deliveries_of(db, deleted) == []
    assert await deliveries_of(db, foreign) == []


async def test_event_without_number_reaches_only_all_number_subscriptions(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    all_numbers = await subscribe(client, ws, events=["contact.updated"])
    some = await subscribe(client, ws, events=["contact.updated"], numberIds=[ws.number_id])
    await publish(client, ws, {"type": "contact.updated", "data": {"id": "CT1"}})
    assert await deliveries_of(db, all_numbers) == ["contact.updated"]
    assert await deliveries_of(db, some) == []


async def test_delivery_payload_is_the_envelope(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await subscribe(client, ws, events=["contact.updated"])
    event = await (
        await publish(client, ws, {"type": "contact.updated", "data": {"id": "C"}})
    ).json()
    listed = await (await client.get(f"/v1/webhooks/{hook}/deliveries", headers=ws.headers)).json()
    (delivery,) = listed["data"]
    assert delivery["payload"] == event
    assert delivery["id"].startswith("WD")
    assert delivery["status"] == "pending" and delivery["attempts"] == 0
    assert delivery["event"] == "contact.updated"
    for field in ("responseStatus", "responseMs", "lastError", "deliveredAt"):
        assert delivery[field] is None
    assert delivery["nextAttemptAt"] is not None


async def test_fan_out_to_ten_thousand_subscriptions(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    async with db.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO webhooks (id, workspace_id, url, events, secret)
            SELECT dispatcher_new_id('WH'), $1, 'https://hooks.example.com/' || g,
                   ARRAY['contact.updated'], 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'
            FROM generate_series(1, 10000) g
            """,
            ws.id,
        )
    started = time.perf_counter()
    resp = await publish(client, ws, {"type": "contact.updated", "data": {"id": "CT1"}})
    elapsed = time.perf_counter() - started
    assert resp.status == 202
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM deliveries") == 10_000
    print(f"\nfan-out of one event to 10,000 subscriptions: {elapsed * 1000:.0f} ms")


async def test_fan_out_to_ten_thousand_filtered_subscriptions(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """A payload filter on every subscription, half of which the event's data contains (its
    speed is measured by `python -m benchmarks fanout`)."""
    async with db.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO webhooks (id, workspace_id, url, events, secret, payload_filter)
            SELECT dispatcher_new_id('WH'), $1, 'https://hooks.example.com/' || g,
                   ARRAY['contact.updated'], 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
                   CASE WHEN g % 2 = 0
                        THEN jsonb_build_object('direction', 'incoming',
                                                'account', jsonb_build_object('tier', 'gold'))
                        ELSE jsonb_build_object('direction', 'incoming', 'n', g) END
            FROM generate_series(1, 10000) g
            """,
            ws.id,
        )
    data = {"id": "CT1", "direction": "incoming", "account": {"tier": "gold", "seats": 3}}
    started = time.perf_counter()
    resp = await publish(client, ws, {"type": "contact.updated", "data": data})
    elapsed = time.perf_counter() - started
    assert resp.status == 202
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM deliveries") == 5_000
    print(f"\nfan-out of one event to 10,000 filtered subscriptions: {elapsed * 1000:.0f} ms")


async def test_outbox_function_is_transactional(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await subscribe(client, ws, events=["contact.updated"])
    async with db.acquire() as conn:
        await conn.execute("CREATE TABLE app_orders (id int PRIMARY KEY)")
        # Rolled back: neither the application's row, nor the event, nor its delivery.
        with pytest.raises(asyncpg.UniqueViolationError):
            async with conn.transaction():
                await conn.fetchval(
                    "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb, $3)",
                    ws.id, {"id": "CT9"}, ws.number_id,
                )  # fmt: skip
                await conn.execute("INSERT INTO app_orders VALUES (1), (1)")
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        assert await deliveries_of(db, hook) == []
        # Committed: both.
        async with conn.transaction():
            await conn.execute("INSERT INTO app_orders VALUES (2)")
            event_id = await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
                ws.id, {"id": "CT9"},
            )  # fmt: skip
        assert event_id.startswith("EV")
        assert await deliveries_of(db, hook) == ["contact.updated"]
        for bad in ("'{}'::jsonb", "'{\"id\": 1}'::jsonb", "'[]'::jsonb"):
            with pytest.raises(asyncpg.InvalidParameterValueError):
                await conn.fetchval(
                    f"SELECT dispatcher_publish_event($1, 'contact.updated', {bad})", ws.id
                )
        with pytest.raises(asyncpg.InvalidParameterValueError):
            await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'webhook.test', '{\"id\": \"x\"}')", ws.id
            )

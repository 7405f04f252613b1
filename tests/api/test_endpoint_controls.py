"""A subscription's rate limit and ordering, and an event's ordering key, as the API takes
them: defaults, PATCH rules, refusals naming the field; the outbox function's ordering key;
the events of calls and messages in their conversation's lane."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api.framework.context import Services
from dispatcher.carrier import SandboxCarrier
from dispatcher.store.database import Database
from tests.conftest import Workspace
from tests.engine.helpers import get_json

URL = "https://hooks.example.com/in"


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["contact.updated"], **fields}
    return await client.post("/v1/webhooks", json=body, headers=ws.headers)


async def buckets(db: Database) -> list[str]:
    async with db.acquire() as conn:
        return [r["webhook_id"] for r in await conn.fetch("SELECT webhook_id FROM webhook_rates")]


async def test_defaults_create_and_patch(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    plain = await (await create(client, ws)).json()
    assert (plain["rateLimit"], plain["ordering"]) == (None, "none")
    made = await create(client, ws, rateLimit=10000, ordering="fifo")
    assert made.status == 201, await made.text()
    hook = await made.json()
    assert (hook["rateLimit"], hook["ordering"]) == (10000, "fifo")
    assert await buckets(db) == [hook["id"]]

    async def patched(body: dict[str, Any]) -> Any:
        resp = await client.patch(f"/v1/webhooks/{hook['id']}", json=body, headers=ws.headers)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    same = await patched({"name": "kept"})  # absent keeps
    assert (same["rateLimit"], same["ordering"]) == (10000, "fifo")
    assert (await patched({"rateLimit": 1}))["rateLimit"] == 1
    assert await buckets(db) == [hook["id"]]
    assert (await patched({"rateLimit": None}))["rateLimit"] is None  # null clears
    assert await buckets(db) == []
    assert (await patched({"ordering": None}))["ordering"] == "none"  # null: the default
    assert (await patched({"ordering": "fifo", "rateLimit": 5}))["ordering"] == "fifo"
    got = await get_json(client, ws, f"/v1/webhooks/{hook['id']}")
    assert (got["rateLimit"], got["ordering"]) == (5, "fifo")
    assert await buckets(db) == [hook["id"]]


BAD_RATE_LIMITS = [0, 10001, -1, 2.5, 10.0, "10", True, [10]]
BAD_ORDERINGS = ["FIFO", "lifo", "", 1, True, ["fifo"]]


@pytest.mark.parametrize(
    "field, value",
    [("rateLimit", v) for v in BAD_RATE_LIMITS] + [("ordering", v) for v in BAD_ORDERINGS],
)
async def test_bad_values_are_refused_naming_the_field(
    client: TestClient[Any, Any], ws: Workspace, db: Database, field: str, value: Any
) -> None:
    resp = await create(client, ws, **{field: value})
    assert resp.status == 400, (field, value)
    error = await resp.json()
    assert error["code"] == "validation_error"
    assert [e["path"] for e in error["errors"]] == [f"body.{field}"]
    assert (await get_json(client, ws, "/v1/webhooks"))["data"] == []
    hook = await (await create(client, ws, rateLimit=7, ordering="fifo")).json()
    resp = await client.patch(f"/v1/webhooks/{hook['id']}", json={field: value}, headers=ws.headers)
    assert resp.status == 400
    assert [e["path"] for e in (await resp.json())["errors"]] == [f"body.{field}"]
    got = await get_json(client, ws, f"/v1/webhooks/{hook['id']}")
    assert (got["rateLimit"], got["ordering"]) == (7, "fifo")
    assert await buckets(db) == [hook["id"]]


BAD_KEYS = ["", "x" * 201, "a\nb", "tab\there", "\x7f", "c1\x85", 42, ["k"], {"k": 1}]


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_a_bad_ordering_key_is_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database, key: Any
) -> None:
    body = {"type": "contact.updated", "data": {"id": "CT1"}, "orderingKey": key}
    resp = await client.post("/v1/events", json=body, headers=ws.headers)
    assert resp.status == 400, key
    error = await resp.json()
    assert [e["path"] for e in error["errors"]] == ["body.orderingKey"]
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0


async def test_the_longest_key_and_null_are_fine(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for key in ("k" * 200, "é" * 200, None):
        body = {"type": "contact.updated", "data": {"id": "CT1"}, "orderingKey": key}
        resp = await client.post("/v1/events", json=body, headers=ws.headers)
        assert resp.status == 202, await resp.text()
        event = await resp.json()
        assert (await get_json(client, ws, f"/v1/events/{event['id']}"))["orderingKey"] == key


async def test_the_outbox_function_takes_an_ordering_key(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    async with db.acquire() as conn:
        keyed = await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', '{\"id\": \"CT1\"}', NULL, "
            "'order-42')",
            ws.id,
        )
        three = await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', '{\"id\": \"CT2\"}')", ws.id
        )
        four = await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', '{\"id\": \"CT3\"}', $2)",
            ws.id,
            ws.number_id,
        )
        for bad in ("''", "repeat('k', 201)", "E'a\\nb'"):
            with pytest.raises(asyncpg.InvalidParameterValueError, match="ordering key"):
                await conn.fetchval(
                    "SELECT dispatcher_publish_event($1, 'contact.updated', "
                    f'\'{{"id": "CT4"}}\', NULL, {bad})',
                    ws.id,
                )
        # Each call matches one signature only: three or four arguments the old, five the new.
        overloads = await conn.fetch(
            "SELECT pronargs, pronargdefaults FROM pg_proc "
            "WHERE proname = 'dispatcher_publish_event' ORDER BY pronargs"
        )
    assert [tuple(r) for r in overloads] == [(4, 1), (5, 0)]
    shown = {
        event_id: (await get_json(client, ws, f"/v1/events/{event_id}"))["orderingKey"]
        for event_id in (keyed, three, four)
    }
    assert shown == {keyed: "order-42", three: None, four: None}


async def test_events_of_calls_and_messages_carry_their_conversation(
    client: TestClient[Any, Any], ws: Workspace, services: Services, db: Database
) -> None:
    contact = "+15557770000"
    inbound = {"from": contact, "to": ws.number, "text": "hi"}
    resp = await client.post("/v1/inbound/messages", json=inbound, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    conversation = (await resp.json())["conversationId"]
    call = {"from": contact, "to": ws.number, "status": "ringing"}
    resp = await client.post("/v1/inbound/calls", json=call, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["conversationId"] == conversation
    sent = {"from": ws.number, "to": contact, "text": "hello"}
    resp = await client.post("/v1/messages", json=sent, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    carrier = SandboxCarrier(db, services.clock, delay=0.0)
    while await carrier.advance():
        pass
    events = (await get_json(client, ws, "/v1/events"))["data"]
    assert sorted(e["type"] for e in events) == [
        "call.ringing",
        "message.delivered",
        "message.received",
    ]
    assert {e["orderingKey"] for e in events} == {conversation}
    one = await get_json(client, ws, f"/v1/events/{events[0]['id']}")
    assert one["orderingKey"] == conversation

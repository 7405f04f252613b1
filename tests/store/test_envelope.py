"""The envelope every delivery carries is built by the database alone (schema.sql:
dispatcher_envelope), whichever door the event came in by: compact JSON with its keys in one
order, `createdAt` in UTC with milliseconds and a `Z`, and `data` as the service serialized it.
What the API answers, what is stored and what every attempt sends are the same bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.domain.events import API_VERSION
from dispatcher.store.database import Database
from tests.conftest import Workspace

AWKWARD: list[dict[str, Any]] = [
    {"id": "CT1"},
    {"id": "é ü 中文 🎉", "quote": '"', "backslash": "\\", "slash": "/"},
    {"id": "ctl", "text": "line\nbreak\ttab\r\b\f\x01\x1f\x7f"},
    {"id": "n", "numbers": [0, -1, 1.5, 1e-7, 12345678901234567], "none": None, "yes": True},
    {"id": "nested", "a": {"b": [{"c": []}, {}]}, "z": 1, "a2": 2},
]


def expected(event_id: str, event_type: str, at: datetime, data: dict[str, Any]) -> str:
    """The envelope's contract, spelled out: these keys in this order, no white space."""
    body = {
        "id": event_id,
        "type": event_type,
        "apiVersion": API_VERSION,
        "createdAt": isoformat(at),
        "data": data,
    }
    return orjson.dumps(body).decode()


@pytest.mark.parametrize("data", AWKWARD)
async def test_the_envelope_is_compact_in_key_order_and_keeps_the_data_text(
    db: Database, data: dict[str, Any]
) -> None:
    at = datetime(2026, 11, 21, 4, 36, 12, 123999, tzinfo=UTC)
    text = orjson.dumps(data).decode()
    async with db.acquire() as conn:
        built = await conn.fetchval(
            "SELECT dispatcher_envelope($1, $2, $3, $4)", "EV1", "contact.updated", at, text
        )
    assert built == expected("EV1", "contact.updated", at, data)
    assert built.endswith(f',"data":{text}}}')


async def test_created_at_is_utc_with_milliseconds_cut_not_rounded(db: Database) -> None:
    paris = timezone(timedelta(hours=1))
    at = datetime(2026, 1, 2, 0, 30, 0, 999999, tzinfo=paris)
    async with db.acquire() as conn:
        built = await conn.fetchval(
            "SELECT dispatcher_envelope('EV1', 'contact.updated', $1, '{\"id\":\"x\"}')", at
        )
    assert orjson.loads(built)["createdAt"] == "2026-01-01T23:30:00.999Z"


async def test_the_api_answers_stores_and_delivers_the_same_bytes(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["contact.updated"]},
        headers=ws.headers,
    )
    assert hook.status == 201
    data = AWKWARD[1]
    resp = await client.post(
        "/v1/events", json={"type": "contact.updated", "data": data}, headers=ws.headers
    )
    assert resp.status == 202
    answered = await resp.text()
    event = orjson.loads(answered)
    async with db.acquire() as conn:
        stored = await conn.fetchval("SELECT payload FROM events WHERE id = $1", event["id"])
        queued = await conn.fetchval("SELECT count(*) FROM delivery_queue")
    assert answered == stored
    assert stored == expected(
        event["id"], "contact.updated", datetime.fromisoformat(event["createdAt"]), data
    )
    assert queued == 1


async def test_the_outbox_envelope_has_the_same_shape(db: Database, ws: Workspace) -> None:
    """The outbox's data is jsonb: the same content, in jsonb's own spelling."""
    async with db.acquire() as conn:
        event_id = await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
            ws.id,
            {"id": "CT9", "b": [1, 2]},
        )
        row = await conn.fetchrow(
            "SELECT payload, created_at, source FROM events WHERE id = $1", event_id
        )
    assert row is not None
    assert row["source"] == "outbox"
    payload = orjson.loads(row["payload"])
    assert list(payload) == ["id", "type", "apiVersion", "createdAt", "data"]
    assert payload == {
        "id": event_id,
        "type": "contact.updated",
        "apiVersion": API_VERSION,
        "createdAt": isoformat(row["created_at"]),
        "data": {"id": "CT9", "b": [1, 2]},
    }
    assert row["payload"].startswith(f'{{"id":"{event_id}","type":"contact.updated",')

"""schema.sql: applied once; the envelope its outbox function stores carries the API version
the code names (dispatcher.domain.events.API_VERSION)."""

from __future__ import annotations

import orjson

from dispatcher.domain.events import API_VERSION
from dispatcher.store import schema
from dispatcher.store.database import Database


async def test_apply_twice_keeps_one_version(db: Database) -> None:
    """A fresh database records only the version schema.sql made it at; applying again finds
    nothing to do."""
    assert await schema.apply_schema(db) == schema.SCHEMA_VERSION
    assert await schema.upgrade(db) == schema.Upgrade(
        schema.SCHEMA_VERSION, schema.SCHEMA_VERSION, ()
    )
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM dispatcher_schema") == 1


async def test_outbox_envelope_uses_the_same_api_version(db: Database) -> None:
    async with db.acquire() as conn:
        await conn.execute("INSERT INTO workspaces (id, name) VALUES ('WS1', 'x')")
        event_id = await conn.fetchval(
            "SELECT dispatcher_publish_event('WS1', 'contact.updated', '{\"id\": \"CT1\"}')"
        )
        payload = orjson.loads(
            await conn.fetchval("SELECT payload FROM events WHERE id = $1", event_id)
        )
    assert payload["apiVersion"] == API_VERSION
    assert payload["id"] == event_id
    assert payload["data"] == {"id": "CT1"}

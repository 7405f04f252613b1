"""The upgrade users will run: a database made by the first release (schema version 1), holding
deliveries in every state, migrated in place by `dispatcher migrate`, then served by this
release's engine; and applications publishing through the SQL outbox while the upgrade runs.

Written against whatever migrations exist: each test runs every one of them, from version 1, in
the one transaction of an upgrade (dispatcher/store/schema.py). A database at a version in
between is never made here: no release is made by this code at one, and the functions such a
release had (functions.sql is the latest only) are not kept.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api import resources
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import SCOPES, Services
from dispatcher.domain import ids, signing
from dispatcher.domain.clock import isoformat
from dispatcher.domain.events import API_VERSION, TEST_EVENT
from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store import schema, workspaces
from dispatcher.store.database import Database
from dispatcher.store.rows import DeliveryRow, as_row
from tests.clock import FakeClock
from tests.conftest import wait_for
from tests.processes import cli
from tests.receiver import Receiver
from tests.store.conftest import NewDatabase, versions

PENDING = ("due", "leased", "retrying", "test")
SETTLED = ("delivered", "failed")


async def seed_version_one(url: str, hook_url: str) -> tuple[str, str, dict[str, str]]:
    """Rows as the first release wrote them, straight in SQL (its outbox function made the
    events and their deliveries): returns (API key, webhook id, delivery id by state)."""
    workspace_id, webhook_id = ids.new_id(ids.WORKSPACE), ids.new_id(ids.WEBHOOK)
    key = workspaces.KEY_PREFIX + secrets.token_urlsafe(32)
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO workspaces (id, name) VALUES ($1, 'made by version 1')", workspace_id
            )
            await conn.execute(
                "INSERT INTO api_keys (id, workspace_id, key_hash, scopes) VALUES ($1, $2, $3, $4)",
                ids.new_id(ids.API_KEY), workspace_id, workspaces.hash_key(key), sorted(SCOPES),
            )  # fmt: skip
            await conn.execute(
                "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
                "VALUES ($1, $2, $3, '{contact.updated}', $4)",
                webhook_id, workspace_id, hook_url, signing.new_secret(),
            )  # fmt: skip
        by_state: dict[str, str] = {}
        for state in ("due", "leased", "retrying", "delivered", "failed"):
            event_id = await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
                workspace_id, f'{{"id": "CT-{state}"}}',
            )  # fmt: skip
            by_state[state] = await conn.fetchval(
                "SELECT id FROM deliveries WHERE event_id = $1", event_id
            )
        # A `POST .../test` delivery as version 1 made it: its own event, source 'test', its
        # envelope serialized by the service.
        now = datetime.now(UTC)
        event_id, delivery_id = ids.new_id(ids.EVENT), ids.new_id(ids.DELIVERY)
        payload = {"id": event_id, "type": TEST_EVENT, "apiVersion": API_VERSION,
                   "createdAt": isoformat(now), "data": {"id": webhook_id}}  # fmt: skip
        await conn.execute(
            "INSERT INTO events (id, workspace_id, type, source, payload, created_at) "
            "VALUES ($1, $2, $3, 'test', $4, $5)",
            event_id, workspace_id, TEST_EVENT, orjson.dumps(payload).decode(), now,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type, "
            "created_at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
            delivery_id, workspace_id, webhook_id, event_id, TEST_EVENT, now,
        )  # fmt: skip
        by_state["test"] = delivery_id
        # Leased by an engine of version 1 that is still (or was, when it died) sending it:
        # next_attempt_at is its lease's expiry.
        await conn.execute(
            "UPDATE deliveries SET lease_owner = 'engine-version-1', "
            "next_attempt_at = now() + interval '10 minutes' WHERE id = $1",
            by_state["leased"],
        )
        await conn.execute(
            "UPDATE deliveries SET attempts = 2, response_status = 503, response_ms = 41, "
            "last_error = 'HTTP 503', next_attempt_at = now() + interval '30 minutes' "
            "WHERE id = $1",
            by_state["retrying"],
        )
        await conn.execute(
            "UPDATE deliveries SET status = 'delivered', attempts = 1, response_status = 200, "
            "response_ms = 12, delivered_at = now(), next_attempt_at = NULL WHERE id = $1",
            by_state["delivered"],
        )
        await conn.execute(
            "UPDATE deliveries SET status = 'failed', attempts = 8, response_status = 500, "
            "response_ms = 230, last_error = 'HTTP 500', next_attempt_at = NULL WHERE id = $1",
            by_state["failed"],
        )
    finally:
        await conn.close()
    return key, webhook_id, by_state


def settings_for(url: str) -> Settings:
    return Settings(
        database_url=url,
        sandbox_delay=0.0,
        allowed_cidrs=Settings.from_env(
            {"DISPATCHER_ALLOWED_CIDRS": "127.0.0.0/8,::1/128"}
        ).allowed_cidrs,
        request_timeout=2.0,
        poll_interval=0.05,
    )


class Api:
    """This release's API on the database, read as a customer reads it."""

    def __init__(self, db: Database, key: str, webhook_id: str) -> None:
        self.db, self.key, self.webhook_id = db, key, webhook_id
        self.client: TestClient[Any, Any] | None = None

    async def __aenter__(self) -> Api:
        settings = settings_for(self.db.url)
        cursor_key = await workspaces.instance_secret(self.db, "cursor")
        services = Services(db=self.db, settings=settings, clock=FakeClock(), cursor_key=cursor_key)
        self.client = TestClient(TestServer(create_app(services), host="127.0.0.1"))
        await self.client.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.client is not None
        await self.client.close()

    async def delivery(self, delivery_id: str) -> Any:
        assert self.client is not None
        resp = await self.client.get(
            f"/v1/webhooks/{self.webhook_id}/deliveries/{delivery_id}",
            headers={"Authorization": f"Bearer {self.key}"},
        )
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def deliveries(self, by_state: dict[str, str]) -> dict[str, Any]:
        return {state: await self.delivery(d) for state, d in by_state.items()}


# What the API reads of a delivery, in the columns the first release has (`expunged`, which a
# later migration adds, could not be read from its rows: none of them was expunged).
VERSION_ONE_DELIVERY = """
SELECT d.id, d.webhook_id, d.attempts, d.created_at, d.delivered_at, d.event_type,
       d.last_error, d.next_attempt_at, d.response_ms, d.response_status, d.status,
       e.payload, false AS expunged
FROM deliveries d JOIN events e ON e.id = d.event_id AND e.created_at = d.created_at
WHERE d.id = $1
"""


async def reads_before_upgrade(url: str, by_state: dict[str, str]) -> dict[str, Any]:
    """What this release's API would show of a database it cannot read yet (the columns it
    reads are a later version's): each delivery built as the API builds it, from its rows."""
    conn = await asyncpg.connect(url)
    try:
        shown = {}
        for state, delivery_id in by_state.items():
            row = await conn.fetchrow(VERSION_ONE_DELIVERY, delivery_id)
            assert row is not None, state
            shown[state] = orjson.loads(orjson.dumps(resources.delivery(as_row(DeliveryRow, row))))
        return shown
    finally:
        await conn.close()


async def reads(url: str, key: str, webhook_id: str, by_state: dict[str, str]) -> dict[str, Any]:
    db = await Database.open(url, min_size=1, max_size=2)
    try:
        async with Api(db, key, webhook_id) as api:
            return await api.deliveries(by_state)
    finally:
        await db.close()


async def deliver_pending(
    url: str, key: str, webhook_id: str, by_state: dict[str, str]
) -> dict[str, Any]:
    """Run this release's engine, at a time past any old lease and retry, until the API shows
    every delivery that was pending as delivered; returns what the API shows then."""
    pending = [state for state in by_state if state in PENDING or state.startswith("outbox")]
    db = await Database.open(url, min_size=1, max_size=10)
    clock = FakeClock(datetime.now(UTC) + timedelta(hours=2), tick=0.001)
    engine = Engine(db, settings_for(url), clock, rand=lambda: 0.5)
    try:
        async with Api(db, key, webhook_id) as api:
            await engine.start()

            async def all_delivered() -> bool:
                now = await api.deliveries({state: by_state[state] for state in pending})
                return all(d["status"] == "delivered" for d in now.values())

            await wait_for(all_delivered, message=f"{', '.join(pending)} delivered")
            await engine.stop()
            return await api.deliveries(by_state)
    finally:
        if engine.running:
            await engine.stop()
        await db.close()


async def test_a_version_one_database_is_migrated_in_place_and_keeps_its_deliveries(
    new_database: NewDatabase, receiver: Receiver
) -> None:
    url = await new_database(v1=True)
    key, webhook_id, by_state = await seed_version_one(url, receiver.url("/hook"))
    before = await reads_before_upgrade(url, by_state)
    assert {state: before[state]["status"] for state in PENDING} == dict.fromkeys(
        PENDING, "pending"
    )

    code, out, err = await cli(url, "migrate")
    assert code == 0, err
    steps = [f"applied {m.name}" for m in schema.load().migrations]
    assert out.splitlines() == [*steps, f"schema at version {schema.SCHEMA_VERSION}"]
    assert await versions(url) == list(range(1, schema.SCHEMA_VERSION + 1))

    migrated = await reads(url, key, webhook_id, by_state)
    for state in SETTLED:
        assert migrated[state] == before[state], state
    for state in PENDING:
        assert migrated[state]["status"] == "pending", state
        assert migrated[state]["attempts"] == before[state]["attempts"], state

    after = await deliver_pending(url, key, webhook_id, by_state)

    # Each pending one sent once (by this engine: one more attempt); no settled one sent.
    sent = sorted(r.headers["webhook-id"] for r in receiver.requests)
    assert sent == sorted(by_state[s] for s in PENDING)
    for state in PENDING:
        assert after[state]["attempts"] == before[state]["attempts"] + 1, state
        assert after[state]["payload"] == before[state]["payload"], state
        assert after[state]["responseStatus"] == 200, state
    for state in SETTLED:
        assert after[state] == before[state], state


PUBLISH = (
    "SELECT dispatcher_publish_event(workspace_id, 'contact.updated', '{\"id\": \"CT9\"}') "
    "FROM webhooks WHERE id = $1"
)


async def waiting_on_a_lock(url: str, *, pid: int | None = None) -> bool:
    """Whether the migration's connection (or the backend `pid`) waits for a lock. Asked on a
    connection of its own: a transaction sees one snapshot of pg_stat_activity."""
    conn = await asyncpg.connect(url)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND (pid = $1 OR ($1 IS NULL AND application_name = $2))",
            pid,
            schema.APPLICATION_NAME,
        )
    finally:
        await conn.close()
    return count > 0


@pytest.mark.parametrize("when", ["open-before", "starts-during"])
async def test_an_outbox_transaction_across_the_upgrade_loses_nothing(
    new_database: NewDatabase, receiver: Receiver, when: str
) -> None:
    """An application publishing through the SQL outbox in its own transactions does not stop
    for an upgrade. A transaction that has published when the upgrade starts, or publishes
    while it runs (held up by a reader, as live traffic would), commits an event whose
    delivery this release delivers afterwards. The whole upgrade, from the first release's
    schema to this one, is one transaction: the application's sees the old schema and
    functions or the new ones, never a version in between, and the upgrade's locks order the
    two (no delivery is written by the old schema's functions after the upgrade read the
    table)."""
    url = await new_database(v1=True)
    key, webhook_id, by_state = await seed_version_one(url, receiver.url("/hook"))
    files = schema.load()
    assert (await versions(url))[-1] == 1

    app, reader = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        await app.execute("BEGIN")
        if when == "open-before":
            event_id = await app.fetchval(PUBLISH, webhook_id)
            run = asyncio.create_task(migrate_with(url, files))
            await wait_for(
                lambda: _either(run.done(), lambda: waiting_on_a_lock(url)),
                message="the migration at the app's locks",
            )
        else:
            await reader.execute("BEGIN")
            await reader.execute("LOCK TABLE events, deliveries IN ACCESS SHARE MODE")
            run = asyncio.create_task(migrate_with(url, files))
            await wait_for(
                lambda: _either(run.done(), lambda: waiting_on_a_lock(url)),
                message="the migration at the reader's lock",
            )
            publish = asyncio.create_task(app.fetchval(PUBLISH, webhook_id))
            pid = app.get_server_pid()
            await wait_for(
                lambda: _either(publish.done(), lambda: waiting_on_a_lock(url, pid=pid)),
                message="the app's publish under way",
            )
            await reader.execute("COMMIT")
            event_id = await publish
        await app.execute("COMMIT")
        await run
        by_state["outbox"] = await app.fetchval(
            "SELECT id FROM deliveries WHERE event_id = $1", event_id
        )
    finally:
        await app.close()
        await reader.close()
    assert await versions(url) == list(range(1, schema.SCHEMA_VERSION + 1))
    after = await deliver_pending(url, key, webhook_id, by_state)
    assert after["outbox"]["status"] == "delivered"
    sent = [r.headers["webhook-id"] for r in receiver.requests]
    assert sent.count(by_state["outbox"]) == 1


async def _either(done: bool, condition: Callable[[], Awaitable[bool]]) -> bool:
    return done or await condition()


async def migrate_with(url: str, files: schema.Schema) -> schema.Upgrade:
    db = await Database.open(url, min_size=1, max_size=1)
    try:
        return await schema.upgrade(db, files)
    finally:
        await db.close()

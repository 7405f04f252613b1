"""Backpressure (issue #22, part 4): past the bound on requests in progress, or when no pool
connection comes free in time, the API answers 503 `overloaded` with `Retry-After` at once,
stores nothing, and never refuses the probes or /metrics.

Requests are held in progress the way a real overload holds them: connections taken from the
app's own pool (as by slow statements) keep requests in their handlers, waiting for one. A
client that sends its body slowly holds no slot while it does (tests/api/test_slow_clients.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.admission import ADMISSION, Admission
from dispatcher.api.framework.context import Services
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for

Client = TestClient[Any, Any]
# A refusal must come at once: far below any wait a test holds requests for.
PROMPT = 1.0


@pytest.fixture
async def small_pool(database_url: str) -> AsyncIterator[Database]:
    """The app's own pool: two connections, so that a test can take them all."""
    database = await Database.open(database_url, min_size=1, max_size=2)
    yield database
    await database.close()


MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    """Released at the end of the test, pass or fail (held pool connections)."""
    async with AsyncExitStack() as exits:
        yield exits


@pytest.fixture
async def make_client(services: Services, small_pool: Database) -> AsyncIterator[MakeClient]:
    """A client of an app on `small_pool` with these backpressure settings."""
    async with AsyncExitStack() as stack:

        async def make(*, acquire_timeout: float | None = None, **settings: Any) -> Client:
            small_pool.acquire_timeout = acquire_timeout
            svc = Services(
                db=small_pool,
                settings=services.settings.with_changes(**settings),
                clock=services.clock,
                cursor_key=services.cursor_key,
            )
            server = TestServer(create_app(svc), host="127.0.0.1")
            return await stack.enter_async_context(TestClient(server))

        yield make


def admission(client: Client) -> Admission:
    server = client.server
    assert isinstance(server, TestServer)
    return server.app[ADMISSION]


class Held:
    """Requests kept in progress: every connection of the app's pool is taken, so that
    publishes wait in their handlers (holding their admission slots) until `release()`."""

    def __init__(self, pool: Database) -> None:
        self._pool = pool
        self._taken = AsyncExitStack()
        self.answers: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> Held:
        for _ in range(self._pool.max_size):
            await self._taken.enter_async_context(self._pool.acquire())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._taken.aclose()

    def publish(self, client: Client, ws: Workspace, event_id: str) -> None:
        self.answers.append(asyncio.create_task(publish(client, ws, event_id)))

    async def release(self) -> list[int]:
        await self._taken.aclose()
        return [(await answer).status for answer in self.answers]


async def publish(client: Client, ws: Workspace, event_id: str) -> Any:
    body = {"type": "contact.updated", "data": {"id": event_id}}
    return await client.post("/v1/events", json=body, headers=ws.headers)


async def stored(db: Database, ws: Workspace) -> list[str]:
    """The `data.id` of every event stored for the workspace."""
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT payload::jsonb -> 'data' ->> 'id' AS id FROM events WHERE workspace_id = $1",
            ws.id,
        )
    return sorted(row["id"] for row in rows)


async def assert_overloaded(resp: Any, started: float) -> None:
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "1"
    body = await resp.json()
    assert body["code"] == "overloaded"
    assert body["status"] == 503
    assert body["trace"] == resp.headers["X-Request-Id"]
    assert time.monotonic() - started < PROMPT


async def overloaded_count(client: Client, reason: str) -> float:
    resp = await client.get("/metrics")
    assert resp.status == 200
    for line in (await resp.text()).splitlines():
        if line.startswith(f'dispatcher_api_overloaded_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no dispatcher_api_overloaded_total series for {reason}")


async def test_past_the_bound_refused_at_once_and_nothing_stored(
    make_client: MakeClient,
    small_pool: Database,
    db: Database,
    ws: Workspace,
    stack: AsyncExitStack,
) -> None:
    client = await make_client(max_requests_in_progress=2, admission_timeout=0.0,
                               acquire_timeout=30.0)  # fmt: skip
    refused_before = await overloaded_count(client, "requests")
    held = await stack.enter_async_context(Held(small_pool))
    held.publish(client, ws, "held-1")
    held.publish(client, ws, "held-2")
    await wait_for(lambda: small_pool.waiting == 2, message="two requests in progress")

    started = time.monotonic()
    await assert_overloaded(await publish(client, ws, "refused"), started)
    # Whatever the route: a read is refused as well.
    started = time.monotonic()
    await assert_overloaded(await client.get("/v1/events", headers=ws.headers), started)
    # The probes and /metrics are never refused, and do not count against the bound.
    assert (await client.get("/healthz")).status == 200
    assert await overloaded_count(client, "requests") == refused_before + 2

    assert await held.release() == [202, 202]
    assert await stored(db, ws) == ["held-1", "held-2"]
    ready = await client.get("/readyz")
    assert ready.status == 200, await ready.text()

    # The load has dropped: requests are let in again.
    resp = await publish(client, ws, "after")
    assert resp.status == 202, await resp.text()
    assert await stored(db, ws) == ["after", "held-1", "held-2"]
    assert admission(client).in_progress == 0


async def test_a_burst_waits_for_a_slot_within_the_admission_timeout(
    make_client: MakeClient,
    small_pool: Database,
    db: Database,
    ws: Workspace,
    stack: AsyncExitStack,
) -> None:
    client = await make_client(max_requests_in_progress=1, admission_timeout=30.0,
                               acquire_timeout=30.0)  # fmt: skip
    held = await stack.enter_async_context(Held(small_pool))
    held.publish(client, ws, "first")
    await wait_for(lambda: small_pool.waiting == 1, message="one request in progress")
    second = asyncio.create_task(publish(client, ws, "second"))
    await wait_for(lambda: admission(client).waiting == 1, message="one request waiting")

    assert await held.release() == [202]
    resp = await second
    assert resp.status == 202, await resp.text()
    assert await stored(db, ws) == ["first", "second"]
    assert (admission(client).in_progress, admission(client).waiting) == (0, 0)


async def test_a_wait_past_the_admission_timeout_is_refused(
    make_client: MakeClient,
    small_pool: Database,
    db: Database,
    ws: Workspace,
    stack: AsyncExitStack,
) -> None:
    client = await make_client(max_requests_in_progress=1, admission_timeout=0.2,
                               acquire_timeout=30.0)  # fmt: skip
    held = await stack.enter_async_context(Held(small_pool))
    held.publish(client, ws, "first")
    await wait_for(lambda: small_pool.waiting == 1, message="one request in progress")

    started = time.monotonic()
    resp = await publish(client, ws, "waited")
    await assert_overloaded(resp, started)
    assert time.monotonic() - started >= 0.2  # it did wait for a slot first
    assert admission(client).waiting == 0

    assert await held.release() == [202]
    assert await stored(db, ws) == ["first"]


async def test_no_pool_connection_in_time_is_refused_and_nothing_stored(
    make_client: MakeClient, small_pool: Database, db: Database, ws: Workspace
) -> None:
    # The process committed before it served (its schema, the demo): its requests still start
    # with nothing committed, and their waits bounded.
    async with small_pool.transaction():
        pass
    client = await make_client(acquire_timeout=0.2)
    refused_before = await overloaded_count(client, "pool")
    # Every connection of the app's pool is taken (as by requests holding them).
    async with small_pool.acquire(), small_pool.acquire():
        started = time.monotonic()
        resp = await publish(client, ws, "refused")
        await assert_overloaded(resp, started)
        assert "connection" in (await resp.json())["message"]
        # Busy is not unready: the database answers, to others.
        ready = await client.get("/readyz")
        assert ready.status == 200, await ready.text()
        assert (await ready.json())["checks"]["database"] is True
        assert (await client.get("/healthz")).status == 200
    assert await overloaded_count(client, "pool") >= refused_before + 1
    assert await stored(db, ws) == []

    resp = await publish(client, ws, "after")
    assert resp.status == 202, await resp.text()
    assert await stored(db, ws) == ["after"]


async def test_a_request_waits_for_a_connection_that_comes_free_in_time(
    make_client: MakeClient, small_pool: Database, db: Database, ws: Workspace
) -> None:
    client = await make_client(acquire_timeout=30.0)
    async with AsyncExitStack() as held:
        for _ in range(2):
            await held.enter_async_context(small_pool.acquire())
        answer = asyncio.create_task(publish(client, ws, "waited"))
        await wait_for(lambda: small_pool.waiting == 1, message="a request waiting for the pool")
    resp = await answer
    assert resp.status == 202, await resp.text()
    assert await stored(db, ws) == ["waited"]


async def test_openapi_declares_503_on_every_route_but_the_probes_and_metrics(
    make_client: MakeClient,
) -> None:
    client = await make_client()
    doc = await (await client.get("/v1/openapi.json")).json()
    paths = doc["paths"]
    publish_503 = paths["/v1/events"]["post"]["responses"]["503"]
    assert "overloaded" in publish_503["description"]
    assert publish_503["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    for path, operations in paths.items():
        for method, operation in operations.items():
            if path in ("/healthz", "/metrics"):
                assert "503" not in operation["responses"], (method, path)
            elif path == "/readyz":
                assert operation["responses"]["503"]["description"] == "not ready"
            else:
                assert "503" in operation["responses"], (method, path)


def test_the_bound_defaults_to_ten_requests_per_pool_connection() -> None:
    assert Settings.from_env({}).max_requests_in_progress == 100
    assert Settings.from_env({"DISPATCHER_POOL_SIZE": "4"}).max_requests_in_progress == 40
    chosen = Settings.from_env(
        {
            "DISPATCHER_POOL_SIZE": "4",
            "DISPATCHER_MAX_REQUESTS_IN_PROGRESS": "7",
            "DISPATCHER_ADMISSION_TIMEOUT": "0",
            "DISPATCHER_POOL_ACQUIRE_TIMEOUT": "0.25",
        }
    )
    assert chosen.max_requests_in_progress == 7
    assert chosen.admission_timeout == 0.0
    assert chosen.pool_acquire_timeout == 0.25


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DISPATCHER_MAX_REQUESTS_IN_PROGRESS", "0"),
        ("DISPATCHER_MAX_REQUESTS_IN_PROGRESS", "many"),
        ("DISPATCHER_ADMISSION_TIMEOUT", "-1"),
        ("DISPATCHER_POOL_ACQUIRE_TIMEOUT", "0"),
    ],
)
def test_a_bad_bound_stops_start_up_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


async def test_a_waiter_that_goes_away_leaves_no_slot_behind() -> None:
    """The client of a waiting request goes away (its handler is cancelled): before and
    after it was handed a slot, the slot count stays exact."""
    gate = Admission(limit=1, timeout=30.0)
    await gate.enter()
    gone = asyncio.create_task(gate.enter())
    await wait_for(lambda: gate.waiting == 1, message="waiting")
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert (gate.in_progress, gate.waiting) == (1, 0)

    handed = asyncio.create_task(gate.enter())
    await wait_for(lambda: gate.waiting == 1, message="waiting")
    gate.leave()  # hands the slot to `handed`...
    handed.cancel()  # ...whose client goes away before it runs: the slot is passed on
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert (gate.in_progress, gate.waiting) == (0, 0)
    await asyncio.wait_for(gate.enter(), timeout=PROMPT)  # free again, at once
    assert gate.in_progress == 1

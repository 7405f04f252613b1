"""API keys kept in memory: served from memory while the database can tell of changes, and a
revoked, deleted or truncated key refused as soon as the change commits, whoever made it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from dispatcher.store.key_cache import MAX_AGE, ApiKey, KeyCache
from tests.conftest import MakeWorkspace, Workspace, wait_for

KEY = ApiKey("AK1", "WS1", frozenset({"messages:read"}))


class Ticking:
    """An injectable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def watched(database_url: str) -> AsyncIterator[KeyCache]:
    cache = KeyCache()
    task = asyncio.create_task(cache.watch(database_url))
    await wait_for(lambda: cache.listening, message="the key listener to connect")
    yield cache
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.fixture
async def cached_client(
    services: Services, watched: KeyCache
) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(dataclasses.replace(services, keys=watched))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


def test_nothing_is_served_while_no_listener_hears_changes() -> None:
    cache = KeyCache()
    cache.put(b"d", KEY, cache.generation)
    assert cache.get(b"d") is None


async def test_an_answer_looked_up_before_a_clear_is_not_kept(watched: KeyCache) -> None:
    generation = watched.generation
    watched.clear()  # a key changed while the lookup was on its way
    watched.put(b"d", KEY, generation)
    assert watched.get(b"d") is None
    watched.put(b"d", KEY, watched.generation)
    assert watched.get(b"d") == KEY


async def test_an_entry_is_trusted_for_max_age_at_most(database_url: str) -> None:
    clock = Ticking()
    cache = KeyCache(monotonic=clock)
    task = asyncio.create_task(cache.watch(database_url))
    try:
        await wait_for(lambda: cache.listening, message="the key listener to connect")
        cache.put(b"d", KEY, cache.generation)
        clock.now += MAX_AGE
        assert cache.get(b"d") == KEY
        clock.now += 0.001
        assert cache.get(b"d") is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_valid_key_is_served_from_memory(
    db: Database, watched: KeyCache, ws: Workspace
) -> None:
    found = await workspaces.find_key(db, ws.key, watched)
    assert found is not None
    # Gone from the table without a notification (the trigger is disabled for this check):
    # the answer now comes from memory, which is what the cache is for.
    async with db.acquire() as conn:
        await conn.execute("ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed")
        try:
            await conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = $1", found.id)
        finally:
            await conn.execute("ALTER TABLE api_keys ENABLE TRIGGER api_keys_changed")
    assert await workspaces.find_key(db, ws.key, watched) == found
    assert await workspaces.find_key(db, ws.key) is None


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE api_keys SET revoked_at = now() WHERE id = $1",
        "DELETE FROM api_keys WHERE id = $1",
        "TRUNCATE api_keys",
    ],
    ids=["revoked", "deleted", "truncated"],
)
async def test_a_change_made_elsewhere_is_refused_as_soon_as_it_commits(
    cached_client: TestClient[Any, Any],
    db: Database,
    watched: KeyCache,
    ws: Workspace,
    change: str,
) -> None:
    """Another replica (or an operator in psql) changes the key: this process forgets it when
    the change commits, and the next request is 401."""
    assert (await cached_client.get("/v1/messages", headers=ws.headers)).status == 200
    found = await workspaces.find_key(db, ws.key)
    assert found is not None
    generation = watched.generation
    async with db.acquire() as conn:
        await conn.execute(change, *([found.id] if "$1" in change else []))
    await wait_for(lambda: watched.generation > generation, within=5, message="the notice")
    assert (await cached_client.get("/v1/messages", headers=ws.headers)).status == 401


async def test_revoking_in_this_process_is_refused_with_no_wait(
    cached_client: TestClient[Any, Any],
    db: Database,
    watched: KeyCache,
    make_workspace: MakeWorkspace,
) -> None:
    ws = await make_workspace()
    other = await make_workspace()
    for caller in (ws, other):
        assert (await cached_client.get("/v1/messages", headers=caller.headers)).status == 200
    found = await workspaces.find_key(db, ws.key)
    assert found is not None
    await workspaces.revoke_key(db, found.id, watched)
    assert (await cached_client.get("/v1/messages", headers=ws.headers)).status == 401
    # The other workspace's key still works (looked up again, then kept again).
    assert (await cached_client.get("/v1/messages", headers=other.headers)).status == 200

"""Fixtures of the chaos tests: a forwarder to Postgres that a test can cut, a pool through it,
and the real API on that pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.settings import Settings
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.chaos.forwarder import Forwarder, forwarding
from tests.clock import FakeClock


@pytest.fixture
async def forwarder(database_url: str) -> AsyncIterator[Forwarder]:
    async with forwarding(database_url) as fwd:
        yield fwd


@pytest.fixture
async def via_forwarder(forwarder: Forwarder) -> AsyncIterator[Database]:
    """A pool whose every connection goes through the forwarder."""
    database = await Database.open(forwarder.url, min_size=1, max_size=8)
    yield database
    await database.close()


@pytest.fixture
async def api(
    via_forwarder: Database, settings: Settings, clock: FakeClock
) -> AsyncIterator[TestClient[Any, Any]]:
    """The real API, served on loopback, on the pool that goes through the forwarder."""
    key = await workspaces.instance_secret(via_forwarder, "cursor")
    services = Services(db=via_forwarder, settings=settings, clock=clock, cursor_key=key)
    async with TestClient(TestServer(create_app(services), host="127.0.0.1")) as client:
        yield client

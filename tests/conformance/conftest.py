"""The servers of the conformance suite as fixtures (servers.py says which and how), each
started for its test in the test's own folder and stopped after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.domain.clock import SystemClock
from dispatcher.engine.worker import Engine
from tests.conformance.servers import (
    ASGI_SERVERS,
    Nginx,
    Receiver,
    start_asgi,
    start_nginx,
    start_node,
)
from tests.receiver import EngineFactory


@pytest.fixture
def engine(make_engine: EngineFactory) -> EngineFactory:
    """Starts an engine on the real clock: the servers take a while to start, and events
    published in SQL are stamped by the database's clock (a test's fake clock, made before
    the servers, would be seconds behind and claim nothing until it caught up). A failed
    attempt is retried an hour later: what a receiver saw is what the first attempts sent."""

    async def start(**overrides: Any) -> Engine:
        return await make_engine(clock_=SystemClock(), **{"retry_schedule": (3600.0,), **overrides})

    return start


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Receiver]:
    server = await start_node(tmp_path)
    yield Receiver(server)
    await server.stop()


@pytest.fixture
async def nginx(tmp_path: Path, node: Receiver) -> AsyncIterator[Nginx]:
    """nginx in front of the `node` receiver (its /signed/ location passes webhooks on)."""
    folder = tmp_path / "nginx"
    folder.mkdir()
    started = await start_nginx(folder, upstream=node.server.port)
    yield started
    await started.server.stop()


@pytest.fixture(params=ASGI_SERVERS)
async def asgi(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Receiver]:
    """asgi_receiver.py served by uvicorn, then by hypercorn."""
    server = await start_asgi(request.param, tmp_path)
    yield Receiver(server)
    await server.stop()

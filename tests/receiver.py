"""A real receiver (an aiohttp server on loopback) and engines started against the test DB."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from dispatcher.domain.clock import Clock
from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.catalog_check import body_problems
from tests.clock import FakeClock


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Receiver:
    """Records every request; answers 200 unless a path has a behaviour."""

    port: int = 0
    requests: list[Received] = field(default_factory=list)
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path = request.path
        self.requests.append(Received(path, dict(request.headers), body))
        self.in_flight[path] = self.in_flight.get(path, 0) + 1
        self.peak[path] = max(self.peak.get(path, 0), self.in_flight[path])
        try:
            behaviour = self.behaviours.get(path)
            if behaviour is None:
                return web.Response(status=200, text="ok")
            return await behaviour(request)
        finally:
            self.in_flight[path] -= 1

    async def hang(self, request: web.Request) -> web.StreamResponse:
        """Hold the request until the test releases it (bounded, never forever)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.release.wait(), timeout=30)
        return web.Response(status=200)


def answer(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> Behaviour:
    async def respond(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers=headers, body=body)

    return respond


@pytest.fixture
async def receiver(request: pytest.FixtureRequest) -> AsyncIterator[Receiver]:
    """A receiver on loopback. When the test ends, every event envelope it got is checked
    against the event catalog's schema of its type (tests/catalog_check.py): a delivery the
    catalog does not describe fails the test that produced it."""
    state = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    yield state
    state.release.set()
    await runner.cleanup()
    if request.node.get_closest_marker("free_event_data") is None:
        problems = body_problems(r.body for r in state.requests)
        assert not problems, "deliveries the event catalog does not describe:\n" + "\n".join(
            problems[:10]
        )


EngineFactory = Callable[..., Awaitable[Engine]]


@pytest.fixture
async def make_engine(
    db: Database, settings: Settings, clock: FakeClock
) -> AsyncIterator[EngineFactory]:
    engines: list[Engine] = []

    async def make(*, clock_: Clock | None = None, start: bool = True, **overrides: Any) -> Engine:
        engine = Engine(
            db,
            settings.with_changes(**overrides),
            clock_ or clock,
            rand=lambda: 0.5,  # no jitter: schedules are exact in tests
        )
        if start:
            await engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        if engine.running:
            await engine.stop()


def sequence(*behaviours: Any) -> Any:
    """Answer with each behaviour in turn, the last one from then on."""
    calls = iter(range(10_000))

    async def respond(request: web.Request) -> web.StreamResponse:
        index = min(next(calls), len(behaviours) - 1)
        result: web.StreamResponse = await behaviours[index](request)
        return result

    return respond


def chunked(body: bytes) -> Any:
    async def respond(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 7):
            await response.write(body[start : start + 7])
        await response.write_eof()
        return response

    return respond

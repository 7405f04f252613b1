"""Engines whose sender is given options (a resolver), faults injected where the sender's
client meets the world, and what users must not read in the errors it records."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Sequence
from typing import Any

import pytest

from dispatcher.engine import http1
from dispatcher.engine.sender import Sender
from dispatcher.engine.worker import Engine
from tests.receiver import EngineFactory

# What users read must not name exception classes, codecs or libraries.
TECHNICAL = re.compile(r"(?i)[a-z]+Error\b|Exception|idna|codec|aiohttp|Client[A-Z]")


async def engine_with(make_engine: EngineFactory, **sender_options: Any) -> Engine:
    engine = await make_engine(start=False, retry_schedule=(1.0,), disable_after=10**8)
    engine.sender = Sender(
        timeout=engine.settings.request_timeout,
        allowed=engine.settings.allowed_cidrs,
        max_connections=10,
        **sender_options,
    )
    await engine.start()
    return engine


class RaisingResolver:
    """A lookup that raises `exc` (the stdlib IDNA codec raised UnicodeError on `a..b`)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> Sequence[dict[str, object]]:
        raise self.exc


class _WriteThenRaise:
    """A transport whose write goes out, then raises."""

    def __init__(self, transport: asyncio.Transport, exc: BaseException) -> None:
        self._transport = transport
        self._exc = exc

    def write(self, data: bytes) -> None:
        self._transport.write(data)
        raise self._exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def inject(monkeypatch: pytest.MonkeyPatch, stage: str, exc: BaseException, port: int) -> Any:
    """Make the sender's client meet `exc` at `stage` of its requests to `port`, where it
    meets the world: the lookup ("resolve", "before": the sender's resolver, returned as its
    options),
    the event loop's connection ("connect": the loop raises as it would make the transport;
    "send": the transport raises once the request is written) and the answer's first line
    ("read"). Returns the Sender options to pass. Production code carries no hook for it."""
    if stage in ("resolve", "before"):
        return {"resolver": RaisingResolver(exc)}
    if stage == "read":

        def status_line(line: bytes) -> tuple[int, bool]:
            raise exc

        monkeypatch.setattr(http1, "_status_line", status_line)
        return {}
    loop = asyncio.get_running_loop()
    create_connection = loop.create_connection

    async def faulty(*args: Any, sock: socket.socket | None = None, **kwargs: Any) -> Any:
        if sock is None or sock.getpeername()[1] != port:
            return await create_connection(*args, sock=sock, **kwargs)
        if stage == "connect":
            sock.close()
            raise exc
        transport, protocol = await create_connection(*args, sock=sock, **kwargs)
        protocol.transport = _WriteThenRaise(transport, exc)
        return transport, protocol

    assert stage in ("connect", "send"), stage
    monkeypatch.setattr(loop, "create_connection", faulty)
    return {}

"""Whatever an attempt raises is a recorded, failed attempt that follows the schedule.

The report: a URL the sender could not look up raised inside the attempt task; nothing was
recorded and the delivery was claimed again forever. Here a fault is injected at each stage of
a real request to a real receiver (resolve, connect, send, read), with exception types the
sender does not expect, where its client meets the world (tests/engine/faults.py: the lookup,
the event loop's connection, the answer's first line), and a bad URL stored before validation
existed is attempted. The real failures at each stage (a lookup that fails, a refused
connection, a server that closes or answers garbage, ...) are tests/engine/test_http1.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.faults import TECHNICAL, engine_with, inject
from tests.engine.helpers import attempted, publish, subscribe
from tests.receiver import EngineFactory, Receiver

UNEXPECTED = "connection error: the request could not be completed"
FAULTS: dict[str, BaseException] = {
    # where: an exception of a type the sender does not expect there
    "resolve": UnicodeError("encoding with 'idna' codec failed (UnicodeError: label empty)"),
    "connect": RuntimeError("boom"),
    "send": ValueError("bad header"),
    "read": UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"),
    "before": KeyError("x"),  # the first thing a request does (its lookup) fails so
}


@pytest.fixture
async def unretrieved() -> AsyncIterator[list[dict[str, Any]]]:
    """Exceptions reported by the loop ("Task exception was never retrieved" and the like)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


@pytest.mark.parametrize("stage", list(FAULTS))
async def test_a_fault_at_any_stage_is_a_recorded_attempt_on_schedule(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
    unretrieved: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    # A host name, so that the lookup is on the path too.
    hook = await subscribe(client, ws, f"http://localhost:{receiver.port}/hook")
    await publish(client, ws)
    options = inject(monkeypatch, stage, FAULTS[stage], receiver.port)
    engine = await engine_with(make_engine, **options)
    first = await attempted(client, ws, hook["id"])
    assert first["status"] == "pending"
    assert first["nextAttemptAt"] is not None
    assert first["responseStatus"] is None
    assert first["lastError"] == UNEXPECTED
    assert not TECHNICAL.search(first["lastError"]), first["lastError"]
    clock.advance(2)
    second = await attempted(client, ws, hook["id"], attempts=2, engine=engine)
    assert second["status"] == "failed"  # the schedule ran out: given up
    assert second["nextAttemptAt"] is None
    assert unretrieved == []
    # The stages really were on the path: the receiver heard from us only after connecting.
    if stage in ("send", "read"):
        await wait_for(lambda: len(receiver.requests) == 2, message="both requests")
    else:
        assert receiver.requests == []


async def test_a_stored_url_the_sender_cannot_attempt_is_recorded(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    make_engine: EngineFactory,
    clock: FakeClock,
    unretrieved: list[dict[str, Any]],
) -> None:
    """A URL stored before the rules existed (written here behind the API's back)."""
    hook = await subscribe(client, ws, "https://hooks.example.com/ok")
    async with db.acquire() as conn:
        await conn.execute("UPDATE webhooks SET url = 'http://a..b/ok' WHERE id = $1", hook["id"])
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(1.0,), disable_after=10**8)
    first = await attempted(client, ws, hook["id"])
    assert first["status"] == "pending"
    assert first["lastError"].startswith("the URL cannot be attempted: ")
    assert "empty label" in first["lastError"]
    assert not TECHNICAL.search(first["lastError"]), first["lastError"]
    clock.advance(2)
    second = await attempted(client, ws, hook["id"], attempts=2, engine=engine)
    assert second["status"] == "failed"
    # A manual retry makes one more recorded attempt, not an endless loop.
    retried = await client.post(
        f"/v1/webhooks/{hook['id']}/deliveries/{second['id']}/retry", headers=ws.headers
    )
    assert retried.status == 202
    third = await attempted(client, ws, hook["id"], attempts=3, engine=engine)
    assert third["status"] == "failed"
    assert unretrieved == []

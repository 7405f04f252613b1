"""Slow clients (issue #23): unfinished request heads, slow bodies and idle connections are held
to time bounds, connections to a count, and none of it stops the API from answering others;
a request whose key is revoked while its body is on its way writes nothing.

Everything runs against the real app on loopback, with raw sockets for the slow clients (a
client library would not send half a head), and short bounds set through the settings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.admission import ADMISSION, Admission
from dispatcher.api.framework.context import Services
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from dispatcher.store.key_cache import KeyCache
from tests.conftest import ADMIN_HEADERS, Workspace, wait_for
from tests.slow_clients import HALF_HEAD, SLOW_CONNECTIONS, enough_open_files

Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]

# How long another client's request may take while the slow ones are open: far above a
# normal answer on loopback, far below any of the timeouts the slow ones wait for.
PROMPT = 1.0


@pytest.fixture
async def make_client(services: Services) -> AsyncIterator[MakeClient]:
    """A client of the app with these settings (the slow-client bounds among them)."""
    async with AsyncExitStack() as stack:

        async def make(keys: KeyCache | None = None, **settings: Any) -> Client:
            svc = Services(
                db=services.db,
                settings=services.settings.with_changes(**settings),
                clock=services.clock,
                cursor_key=services.cursor_key,
                keys=keys,
            )
            server = TestServer(create_app(svc), host="127.0.0.1")
            return await stack.enter_async_context(TestClient(server))

        yield make


@pytest.fixture
async def sockets() -> AsyncIterator[list[Stream]]:
    """The test's raw connections, closed at its end whatever happens."""
    opened: list[Stream] = []
    yield opened
    for _, writer in opened:
        writer.close()


def admission(client: Client) -> Admission:
    server = client.server
    assert isinstance(server, TestServer)
    return server.app[ADMISSION]


async def connect(client: Client, sockets: list[Stream], count: int, first: bytes) -> None:
    """Open `count` connections, each sending `first` and nothing more (in batches, so that
    the listen backlog is not what is measured)."""
    server = client.server
    for start in range(0, count, 200):
        batch = await asyncio.gather(
            *(
                asyncio.open_connection(server.host, server.port)
                for _ in range(min(200, count - start))
            )
        )
        for reader, writer in batch:
            writer.write(first)
            sockets.append((reader, writer))
        await asyncio.gather(*(writer.drain() for _, writer in batch))


async def ended(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (or resets it)."""
    try:
        return await reader.read()
    except ConnectionError:
        return b""


async def assert_answering(client: Client, ws: Workspace) -> None:
    """Another client, on a connection of its own, is answered at once."""
    for _ in range(3):
        started = time.monotonic()
        headers = {**ws.headers, "Connection": "close"}
        async with client.get("/v1/me", headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        assert time.monotonic() - started < PROMPT


async def events_of(db: Database, ws: Workspace) -> int:
    async with db.acquire() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id
        )
    return count


async def closed_reason(client: Client, reason: str) -> float:
    text = await (await client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(f'dispatcher_api_connections_closed_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no dispatcher_api_connections_closed_total series for {reason}")


async def test_thousands_of_half_sent_heads_time_out_while_others_are_answered(
    make_client: MakeClient, ws: Workspace, sockets: list[Stream]
) -> None:
    enough_open_files(2 * SLOW_CONNECTIONS + 500)
    client = await make_client(head_timeout=4.0, max_connections=3 * SLOW_CONNECTIONS)
    before = await closed_reason(client, "head_timeout")
    started = time.monotonic()
    await connect(client, sockets, SLOW_CONNECTIONS, HALF_HEAD)
    await assert_answering(client, ws)

    answers = await asyncio.wait_for(
        asyncio.gather(*(ended(reader) for reader, _ in sockets)), timeout=60
    )
    # Each was answered 408 in the error shape, then closed, after the head timeout.
    assert time.monotonic() - started >= 4.0
    timed_out = [answer for answer in answers if answer.startswith(b"HTTP/1.1 408 ")]
    assert len(timed_out) == SLOW_CONNECTIONS, answers[0]
    body = orjson.loads(timed_out[0].split(b"\r\n\r\n", 1)[1])
    assert body["code"] == "request_timeout"
    assert await closed_reason(client, "head_timeout") == before + SLOW_CONNECTIONS
    await assert_answering(client, ws)


async def test_past_the_connection_bound_the_longest_waiting_head_makes_room(
    make_client: MakeClient, ws: Workspace, sockets: list[Stream]
) -> None:
    """The head timeout is long here: what keeps the API answering is the bound, which
    closes the connections that waited longest for a head to let new ones in."""
    enough_open_files(2 * SLOW_CONNECTIONS + 500)
    client = await make_client(head_timeout=600.0, max_connections=300)
    await connect(client, sockets, SLOW_CONNECTIONS, HALF_HEAD)
    await assert_answering(client, ws)
    oldest = await asyncio.wait_for(
        asyncio.gather(*(ended(reader) for reader, _ in sockets[: SLOW_CONNECTIONS - 300])),
        timeout=30,
    )
    assert oldest == [b""] * (SLOW_CONNECTIONS - 300)  # closed without an answer
    assert await closed_reason(client, "evicted") >= SLOW_CONNECTIONS - 300
    # The newest stay open (the bound holds them): the last one is still waiting.
    assert not sockets[-1][0].at_eof()


async def test_slow_bodies_hold_no_slot_and_time_out(
    make_client: MakeClient, db: Database, ws: Workspace, sockets: list[Stream]
) -> None:
    client = await make_client(max_requests_in_progress=2, admission_timeout=5.0,
                               body_timeout=3.0)  # fmt: skip
    body = orjson.dumps({"type": "contact.updated", "data": {"id": "slow"}})
    head = (
        f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ws.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    await connect(client, sockets, 20, head + body[:10])
    await wait_for(lambda: admission(client).awaiting_body == 20, message="20 slow bodies")
    assert admission(client).in_progress == 0

    # Ten times the bound of requests in progress wait for their bodies: others are let in.
    started = time.monotonic()
    resp = await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "fast"}}, headers=ws.headers
    )
    assert resp.status == 202, await resp.text()
    assert time.monotonic() - started < PROMPT

    answers = await asyncio.wait_for(
        asyncio.gather(*(ended(reader) for reader, _ in sockets)), timeout=30
    )
    for answer in answers:
        head_part, _, payload = answer.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 408 "), answer
        assert orjson.loads(payload)["code"] == "request_timeout"
    assert await events_of(db, ws) == 1  # only the fast one
    assert (admission(client).in_progress, admission(client).awaiting_body) == (0, 0)


async def test_an_idle_connection_closes_after_the_keepalive_timeout(
    make_client: MakeClient, sockets: list[Stream]
) -> None:
    client = await make_client(keepalive_timeout=0.5)
    await connect(client, sockets, 1, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    reader, _ = sockets[0]
    started = time.monotonic()
    answer = await asyncio.wait_for(ended(reader), timeout=10)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert time.monotonic() - started >= 0.5


async def key_id(db: Database, ws: Workspace) -> str:
    async with db.acquire() as conn:
        found: str = await conn.fetchval("SELECT id FROM api_keys WHERE workspace_id = $1", ws.id)
    return found


class Deaf(KeyCache):
    """A key cache that serves what it holds and hears no change: the moment between another
    process's revocation and this one hearing of it, made to last."""

    @property
    def listening(self) -> bool:
        return True


@pytest.mark.parametrize("revoked_by", ["admin API", "another process"])
async def test_a_key_revoked_while_the_body_is_on_its_way_writes_nothing(
    make_client: MakeClient, db: Database, ws: Workspace, sockets: list[Stream], revoked_by: str
) -> None:
    client = await make_client(keys=Deaf())
    assert (await client.get("/v1/me", headers=ws.headers)).status == 200  # now cached
    body = orjson.dumps({"type": "contact.updated", "data": {"id": "late"}})
    head = (
        f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ws.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    await connect(client, sockets, 1, head)
    # The head is in and its key was found valid: the request waits for its body.
    await wait_for(lambda: admission(client).awaiting_body == 1, message="the request waiting")

    revoked = await key_id(db, ws)
    if revoked_by == "admin API":
        resp = await client.delete(
            f"/v1/admin/workspaces/{ws.id}/keys/{revoked}", headers=ADMIN_HEADERS
        )
        assert resp.status == 204
    else:
        await workspaces.revoke_key(db, revoked)

    reader, writer = sockets[0]
    writer.write(body)
    answer = await asyncio.wait_for(reader.read(65536), timeout=10)
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "unauthorized"
    assert await events_of(db, ws) == 0


def test_the_bounds_are_settings_with_defaults() -> None:
    defaults = Settings.from_env({})
    assert (defaults.head_timeout, defaults.body_timeout) == (10.0, 30.0)
    assert (defaults.keepalive_timeout, defaults.max_connections) == (75.0, 1000)
    chosen = Settings.from_env(
        {
            "DISPATCHER_HEAD_TIMEOUT": "2",
            "DISPATCHER_BODY_TIMEOUT": "5",
            "DISPATCHER_KEEPALIVE_TIMEOUT": "30",
            "DISPATCHER_MAX_CONNECTIONS": "20000",
        }
    )
    assert (chosen.head_timeout, chosen.body_timeout) == (2.0, 5.0)
    assert (chosen.keepalive_timeout, chosen.max_connections) == (30.0, 20000)
    for name in ("HEAD_TIMEOUT", "BODY_TIMEOUT", "KEEPALIVE_TIMEOUT", "MAX_CONNECTIONS"):
        with pytest.raises(ConfigurationError, match=f"DISPATCHER_{name}"):
            Settings.from_env({f"DISPATCHER_{name}": "0"})

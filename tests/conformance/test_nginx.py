"""The sender against Debian's nginx, in front of the Node receiver as receivers run it: over
plain HTTP/1.1, TLS 1.2 and TLS 1.3 (a self-signed certificate the engine is told to trust),
delivered and signed over kept-alive connections (nginx's own log counts them), a chunked
answer, 5xx answers and a connection closed without an answer each recorded as what it was."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conformance.delivering import (
    attempts,
    delivery_ids,
    first_attempt,
    signed_webhook,
    wait_delivered,
)
from tests.conformance.servers import CAPPED_REQUESTS, Nginx, Receiver
from tests.conftest import Workspace
from tests.engine.helpers import bulk_publish, publish, subscribe
from tests.receiver import EngineFactory

EVENTS = 40
CONCURRENCY = 4
TLS_OF = {"http": "-", "http-capped": "-", "tls1.2": "TLSv1.2", "tls1.3": "TLSv1.3"}


@pytest.fixture
def trust_nginx(nginx: Nginx, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine trusts nginx's certificate (the only one: OpenSSL's default CA file)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(nginx.cert))


@pytest.mark.parametrize("listener", ["http", "tls1.2", "tls1.3"])
async def test_delivered_signed_and_kept_alive(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    nginx: Nginx,
    node: Receiver,
    trust_nginx: None,
    engine: EngineFactory,
    listener: str,
) -> None:
    url = nginx.url("/signed/a", listener)
    hook = await signed_webhook(client, ws, url, node, maxConcurrency=CONCURRENCY)
    await bulk_publish(db, ws, EVENTS)
    await engine()
    await wait_delivered(db, hook["id"], EVENTS)

    seen = await node.stats("/signed/a")  # passed on by nginx, checked by Node
    assert (seen["requests"], seen["verified"], seen["rejected"]) == (EVENTS, EVENTS, 0)
    assert set(seen["ids"]) == await delivery_ids(client, ws, hook["id"])
    logged = nginx.lines("/signed/")
    assert len(logged) == EVENTS
    assert {line.status for line in logged} == {200}
    assert {line.tls for line in logged} == {TLS_OF[listener]}
    connections = {line.connection for line in logged}
    assert 1 <= len(connections) <= CONCURRENCY  # kept alive ...
    assert max(line.connection_requests for line in logged) >= EVENTS // CONCURRENCY  # ... reused
    assert {a["responseBody"] for a in await attempts(client, ws, hook["id"])} == {"ok"}


async def test_a_connection_the_server_closes_is_not_used_again(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    nginx: Nginx,
    node: Receiver,
    engine: EngineFactory,
) -> None:
    """nginx closes each connection after CAPPED_REQUESTS requests, saying so in the last
    answer (`Connection: close`): the sender opens new ones, and no attempt fails."""
    url = nginx.url("/signed/a", "http-capped")
    hook = await signed_webhook(client, ws, url, node, maxConcurrency=CONCURRENCY)
    await bulk_publish(db, ws, EVENTS)
    await engine()
    await wait_delivered(db, hook["id"], EVENTS)

    logged = nginx.lines("/signed/")
    assert len(logged) == EVENTS  # each request once
    assert max(line.connection_requests for line in logged) == CAPPED_REQUESTS
    assert len({line.connection for line in logged}) >= EVENTS // CAPPED_REQUESTS
    tried = await attempts(client, ws, hook["id"])
    assert (len(tried), {a["outcome"] for a in tried}) == (EVENTS, {"success"})
    assert (await node.stats("/signed/a"))["verified"] == EVENTS


async def test_each_answer_recorded_as_what_it_was(
    client: TestClient[Any, Any],
    ws: Workspace,
    nginx: Nginx,
    trust_nginx: None,
    engine: EngineFactory,
) -> None:
    paths = ("/chunked/a", "/status/500/a", "/status/503/a", "/close/a")
    hooks = {path: await subscribe(client, ws, nginx.url(path, "tls1.3")) for path in paths}
    await publish(client, ws)
    await engine()
    got = {path: await first_attempt(client, ws, hook["id"]) for path, hook in hooks.items()}

    chunked = got["/chunked/a"]
    assert (chunked["outcome"], chunked["responseStatus"], chunked["error"]) == (
        "success",
        200,
        None,
    )
    assert chunked["responseBody"] == "accepted, in chunks by nginx"
    (line,) = nginx.lines("/chunked/")
    assert (line.status, line.transfer_encoding, line.tls) == (200, "chunked", "TLSv1.3")

    server_error = got["/status/500/a"]
    assert (server_error["outcome"], server_error["responseStatus"], server_error["error"]) == (
        "http_error",
        500,
        "HTTP 500",
    )
    assert "500 Internal Server Error" in server_error["responseBody"]  # nginx's own page
    unavailable = got["/status/503/a"]
    assert (unavailable["outcome"], unavailable["responseStatus"], unavailable["error"]) == (
        "http_error",
        503,
        "HTTP 503",
    )
    assert unavailable["responseBody"] == "nginx says 503"

    closed = got["/close/a"]  # nginx's 444: the connection closed, no answer
    assert (closed["outcome"], closed["responseStatus"], closed["error"]) == (
        "connection_error",
        None,
        "connection closed before a response",
    )
    assert {line.status for line in nginx.lines("/close/")} == {444}

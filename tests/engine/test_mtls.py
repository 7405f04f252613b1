"""Mutual TLS in the engine, against a real TLS server on 127.0.0.1 (aiohttp served with an
SSLContext that requires a client certificate signed by a test CA; every certificate made here
with `cryptography`, tests/tls_certificates.py).

What it shows: the webhook's certificate is presented and the delivery succeeds; without one
the failure is recorded as the receiver's refusal; a connection that presented one webhook's
certificate is never used for another webhook; `caCertificate` is trusted for its endpoint
only; a PATCH is used from the next attempt; the key's temporary files do not outlive the
context."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.engine import client_tls, http1
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import attempted, deliveries, publish, subscribe
from tests.receiver import EngineFactory
from tests.tls_certificates import Authority, Issued


@dataclass
class Seen:
    path: str
    subject: str | None  # the client certificate's CN, as the server verified it
    connection: int  # the client's port: one per connection


@dataclass
class TlsServer:
    ca: Authority
    port: int = 0
    seen: list[Seen] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]


class _Handler(BaseHTTPRequestHandler):
    """Answers 200 to every POST, keeping the connection open (HTTP/1.1), and notes who sent
    it over which connection."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        assert isinstance(self.connection, ssl.SSLSocket)
        peer: Any = self.connection.getpeercert() or {}
        names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        seen = Seen(self.path, str(names[0]) if names else None, self.client_address[1])
        self.server.state.seen.append(seen)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    """Python's ssl server: each connection's handshake in its own thread, where a refused
    client certificate is answered with the TLS alert (written to the socket at once)."""

    daemon_threads = True

    def __init__(self, state: TlsServer, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state, self.context = state, context

    def finish_request(self, request: Any, client_address: Any) -> None:
        wrapped = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            wrapped.do_handshake()
        except (ssl.SSLError, OSError):
            _linger(wrapped)  # refused: the alert was sent
            wrapped.close()
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def _linger(sock: socket.socket) -> None:
    """Close as nginx's `lingering_close` does: read what the client sent after the alert
    before closing, so that the close is no reset that would drop the alert unread."""
    with contextlib.suppress(OSError):  # (the plain socket's calls: TLS is over)
        sock.settimeout(2)
        socket.socket.shutdown(sock, socket.SHUT_WR)
        while socket.socket.recv(sock, 65536):
            pass


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority()


@pytest.fixture
def server(ca: Authority) -> Iterator[TlsServer]:
    state = TlsServer(ca)
    httpd = _Server(state, ca.server_context())
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.fixture
def system_trusts_the_ca(ca: Authority, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test CA among the system's (OpenSSL reads SSL_CERT_FILE when a default context is
    made): a webhook without `caCertificate` then gets past verifying the server."""
    bundle = tmp_path / "system.pem"
    bundle.write_text(ca.pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))


def tls_of(issued: Issued, ca: Authority | None = None) -> dict[str, Any]:
    return {
        "clientCertificate": issued.certificate,
        "clientKey": issued.key,
        "caCertificate": None if ca is None else ca.pem,
    }


async def test_the_certificate_is_presented_and_never_on_another_webhooks_connection(
    client: TestClient[Any, Any],
    ws: Workspace,
    server: TlsServer,
    ca: Authority,
    make_engine: EngineFactory,
    system_trusts_the_ca: None,
) -> None:
    first = await subscribe(client, ws, server.url("/a"), tls=tls_of(ca.issue("client a"), ca))
    await make_engine()
    await publish(client, ws, "CT1")
    assert (await attempted(client, ws, first["id"]))["status"] == "delivered"

    # Its connection waits in the pool; the next webhooks to the same server must not use it.
    second = await subscribe(client, ws, server.url("/b"), tls=tls_of(ca.issue("client b"), ca))
    plain = await subscribe(client, ws, server.url("/plain"))
    await publish(client, ws, "CT2")

    async def settled(hook_id: str, n: int) -> list[Any]:
        async def done() -> bool:
            found = await deliveries(client, ws, hook_id)
            return len(found) == n and all(d["attempts"] >= 1 for d in found)

        await wait_for(done, message="deliveries attempted")
        return await deliveries(client, ws, hook_id)

    assert {d["status"] for d in await settled(first["id"], 2)} == {"delivered"}
    assert {d["status"] for d in await settled(second["id"], 1)} == {"delivered"}
    (refused,) = await settled(plain["id"], 1)
    assert refused["status"] == "pending"
    assert refused["lastError"] == http1.NO_CLIENT_CERTIFICATE
    assert refused["responseStatus"] is None

    assert [s.subject for s in server.at("/a")] == ["client a", "client a"]
    assert [s.subject for s in server.at("/b")] == ["client b"]
    assert server.at("/plain") == []  # refused before any request
    # Pooled per webhook: A's second request on A's connection, B's on one of its own.
    a_first, a_second = server.at("/a")
    assert a_first.connection == a_second.connection
    assert server.at("/b")[0].connection != a_first.connection


async def test_the_private_ca_is_trusted_for_its_endpoint_only(
    client: TestClient[Any, Any],
    ws: Workspace,
    server: TlsServer,
    ca: Authority,
    make_engine: EngineFactory,
) -> None:
    issued = ca.issue("client")
    trusting = await subscribe(client, ws, server.url("/trusting"), tls=tls_of(issued, ca))
    own_cert = await subscribe(client, ws, server.url("/own"), tls=tls_of(ca.issue("other")))
    plain = await subscribe(client, ws, server.url("/plain"))
    await make_engine()
    await publish(client, ws)
    assert (await attempted(client, ws, trusting["id"]))["status"] == "delivered"
    for hook in (own_cert, plain):
        delivery = await attempted(client, ws, hook["id"])
        assert delivery["lastError"] == http1.CERTIFICATE, hook
    assert [s.subject for s in server.seen] == ["client"]


async def test_a_refused_certificate_then_a_patch_used_from_the_next_attempt(
    client: TestClient[Any, Any],
    ws: Workspace,
    server: TlsServer,
    ca: Authority,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    stranger = Authority("another CA").issue("stranger")  # a CA the server does not know
    hook = await subscribe(client, ws, server.url("/hook"), tls=tls_of(stranger, ca))
    await publish(client, ws)
    engine = await make_engine()
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    assert delivery["lastError"] == http1.CLIENT_CERTIFICATE_REFUSED
    assert server.seen == []

    change = {"tls": tls_of(ca.issue("renewed"), ca)}
    resp = await client.patch(f"/v1/webhooks/{hook['id']}", json=change, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    clock.set(datetime.fromisoformat(delivery["nextAttemptAt"]))
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert delivery["status"] == "delivered"
    assert [s.subject for s in server.seen] == ["renewed"]


def test_the_keys_files_do_not_outlive_the_context(
    ca: Authority, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = client_tls.context(tls_of(ca.issue("client"), ca))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert os.listdir(tmp_path) == []
    with pytest.raises(ssl.SSLError):
        client_tls.context(
            {**tls_of(ca.issue("client")), "clientKey": tls_of(ca.issue("x"))["clientKey"]}
        )
    assert os.listdir(tmp_path) == []

"""The egress proxy (DISPATCHER_EGRESS_PROXY) against a real one: Debian's tinyproxy, started
by each test on a free loopback port with its own configuration.

Plain http goes in absolute-form (the proxy's log shows the request, the receiver sees its
Via); https in a CONNECT tunnel to the checked address with TLS to the receiver's name inside;
the proxy's own failures (nothing listening, 407, a CONNECT it refuses, an error page it made)
are recorded as `egress proxy: ...`, follow the schedule and never disable the endpoint; the
proxy's credentials appear in no log, no answer and no request to the receiver.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.proxy import EgressProxy, parse_egress_proxy
from dispatcher.engine.http1 import Http1Client
from dispatcher.engine.sender import Sender
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings, known_variables
from tests.conftest import LOGGED, Workspace, wait_for
from tests.engine.helpers import attempted, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer

TINYPROXY = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
LOOPBACK = Settings.from_env({"DISPATCHER_ALLOWED_CIDRS": "127.0.0.0/8,::1/128"}).allowed_cidrs
PASSWORD = "pr0xy-s3cret-Pa55"

pytestmark = pytest.mark.skipif(
    not Path(TINYPROXY).exists(), reason="tinyproxy is not installed (apt-get install tinyproxy)"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Tinyproxy:
    """A tinyproxy process, in the foreground, logging every request to `log`."""

    def __init__(self, folder: Path, connect_ports: Sequence[int], basic_auth: bool) -> None:
        self.port = free_port()
        self.log = folder / "tinyproxy.log"
        self.conf = folder / "tinyproxy.conf"
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 10",
            "MaxClients 50",
            "Allow 127.0.0.1",
            f'LogFile "{self.log}"',
            "LogLevel Connect",
            *(f"ConnectPort {port}" for port in connect_ports),
        ]
        if basic_auth:
            lines.append(f"BasicAuth dispatcher {PASSWORD}")
        self.conf.write_text("\n".join(lines) + "\n")
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            TINYPROXY, "-d", "-c", str(self.conf),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

        async def listening() -> bool:
            assert self.process is not None and self.process.returncode is None, "tinyproxy died"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                return False
            writer.close()
            return True

        await wait_for(listening, message="tinyproxy listening")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


@contextlib.asynccontextmanager
async def tinyproxy(
    folder: Path, connect_ports: Sequence[int] = (), *, basic_auth: bool = False
) -> AsyncIterator[Tinyproxy]:
    proxy = Tinyproxy(folder, connect_ports, basic_auth)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def proxy_setting(url: str) -> EgressProxy:
    proxy = Settings.from_env({"DISPATCHER_EGRESS_PROXY": url}).egress_proxy
    assert proxy is not None
    return proxy


# -- plain http: absolute-form, through the engine ----------------------------------------------


async def test_http_goes_through_the_proxy_in_absolute_form(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    async with tinyproxy(tmp_path) as proxy:
        await make_engine(egress_proxy=proxy_setting(proxy.url))
        delivery = await attempted(client, ws, hook["id"])
        assert (delivery["status"], delivery["responseStatus"]) == ("delivered", 200)
        (request,) = receiver.requests
        assert "tinyproxy" in request.headers["Via"]  # it came through the proxy
        assert request.headers["webhook-id"] == delivery["id"]  # signed as ever
        # Asked for the checked address, in absolute-form.
        assert f"POST http://127.0.0.1:{receiver.port}/hook" in proxy.logged()


async def test_credentials_reach_the_proxy_only_and_no_log(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    settings: Settings,
    tmp_path: Path,
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    logged_before = len(LOGGED)
    async with tinyproxy(tmp_path, basic_auth=True) as proxy:
        url = proxy.url.replace("http://", f"http://dispatcher:{PASSWORD}@")
        with_proxy = Settings.from_env({"DISPATCHER_EGRESS_PROXY": url})
        engine = await make_engine(egress_proxy=with_proxy.egress_proxy)
        delivery = await attempted(client, ws, hook["id"])
        assert delivery["status"] == "delivered"
        assert "Proxy-Authorization" not in receiver.requests[0].headers  # hop-by-hop
        await engine.stop()
    token = base64.b64encode(f"dispatcher:{PASSWORD}".encode()).decode()
    shown = [
        repr(with_proxy),
        repr(with_proxy.egress_proxy),
        str(with_proxy.redacted()),
        str(settings.with_changes(egress_proxy=with_proxy.egress_proxy).redacted()),
        *LOGGED[logged_before:],
    ]
    for text in shown:
        assert PASSWORD not in text and token not in text
    assert with_proxy.redacted()["egress_proxy"] == f"http://dispatcher:***@127.0.0.1:{proxy.port}"


# -- https: a CONNECT tunnel to the checked address, TLS to the name ----------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the name `receiver.test` and 127.0.0.1 (key, cert)."""
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=receiver.test",
         "-addext", "subjectAltName=DNS:receiver.test,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert


class TlsReceiver:
    """An HTTPS receiver on loopback that records each request's head."""

    def __init__(self, certificate: tuple[Path, Path]) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(certificate[1], certificate[0])
        self.heads: list[bytes] = []
        self.server_names: list[str | None] = []
        self.context.sni_callback = self._sni
        self.port = 0

    def _sni(self, _: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        self.server_names.append(name)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()


class Names:
    """A resolver that answers `receiver.test` with 127.0.0.1 (and counts its lookups)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> Sequence[Mapping[str, object]]:
        self.asked.append(host)
        if host != "receiver.test":
            raise OSError("no such name")
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": 0}]  # fmt: skip


async def test_https_goes_through_a_connect_tunnel_to_the_checked_address(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    tls = TlsReceiver(certificate)
    server = await asyncio.start_server(tls.serve, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    names = Names()
    try:
        async with tinyproxy(tmp_path, [port]) as proxy:
            trusting = ssl.create_default_context(cafile=str(certificate[1]))
            client = Http1Client(
                timeout=5, allowed=LOOPBACK, max_connections=4, ssl_context=trusting,
                resolver=names, proxy=proxy_setting(proxy.url),
            )  # fmt: skip
            try:
                for _ in range(3):
                    response = await client.post(f"https://receiver.test:{port}/hook", b"", b"{}")
                    assert response.status == 200
                assert client.open_connections == 1  # one tunnel, kept alive
            finally:
                await client.close()
            logged = proxy.logged()
    finally:
        server.close()
        await server.wait_closed()
    assert names.asked == ["receiver.test"]  # looked up (and judged) here, once
    assert f"CONNECT 127.0.0.1:{port}" in logged  # the proxy was asked for the address ...
    assert "receiver.test" not in logged  # ... never for the name
    assert tls.server_names == ["receiver.test"]  # the name is the TLS server name
    assert len(tls.heads) == 3
    assert all(f"Host: receiver.test:{port}".encode() in head for head in tls.heads)


async def test_the_engine_delivers_https_through_the_tunnel(
    client: TestClient[Any, Any],
    ws: Workspace,
    make_engine: EngineFactory,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[1]))  # the engine's trust: this cert
    tls = TlsReceiver(certificate)
    server = await asyncio.start_server(tls.serve, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    try:
        hook = await subscribe(client, ws, f"https://127.0.0.1:{port}/hook")
        await publish(client, ws)
        async with tinyproxy(tmp_path, [port]) as proxy:
            await make_engine(egress_proxy=proxy_setting(proxy.url))
            delivery = await attempted(client, ws, hook["id"])
            logged = proxy.logged()
    finally:
        server.close()
        await server.wait_closed()
    assert (delivery["status"], delivery["responseStatus"]) == ("delivered", 200)
    assert f"CONNECT 127.0.0.1:{port}" in logged
    (head,) = tls.heads
    assert f"webhook-id: {delivery['id']}".encode() in head
    assert b"Proxy-Authorization" not in head


async def test_a_name_the_guard_refuses_is_never_asked_of_the_proxy(tmp_path: Path) -> None:
    async with tinyproxy(tmp_path) as proxy:
        sender = Sender(timeout=2, allowed=(), max_connections=2, resolver=Names(),
                        proxy=proxy_setting(proxy.url))  # fmt: skip
        await sender.start()
        try:
            outcome = await sender.send("https://receiver.test:443/hook", "WD1", [], b"{}")
        finally:
            await sender.close()
        assert outcome.kind == "blocked" and not outcome.proxy_failure
        # No request reached it (tinyproxy logs each as `Request (file descriptor n): ...`; a
        # line at its level CONNECT, `Connect (file descriptor n)`, is the start-up probe's).
        assert "Request (" not in proxy.logged()


async def test_an_echo_of_the_proxys_credentials_is_redacted(
    receiver: Receiver, tmp_path: Path
) -> None:
    token = base64.b64encode(f"dispatcher:{PASSWORD}".encode()).decode()
    receiver.behaviours["/echo"] = answer(200, body=f"saw {PASSWORD} and {token}".encode())
    async with tinyproxy(tmp_path, basic_auth=True) as proxy:
        url = proxy.url.replace("http://", f"http://dispatcher:{PASSWORD}@")
        outcome = await send_through(url, receiver.url("/echo"), excerpt_bytes=1024)
    assert outcome.response_body == "saw [redacted] and [redacted]"


async def test_the_demo_receiver_is_reached_directly_everything_else_through_the_proxy(
    receiver: Receiver,
) -> None:
    demo = receiver.url("/demo/receiver")  # the exact URL `serve` exempts (its own address)
    nothing = proxy_setting(f"http://127.0.0.1:{free_port()}")
    sender = Sender(timeout=2, allowed=LOOPBACK, max_connections=4, exempt_urls=[demo],
                    proxy=nothing)  # fmt: skip
    await sender.start()
    try:
        direct = await sender.send(demo, "WD1", [], b"{}")
        proxied = await sender.send(receiver.url("/other"), "WD2", [], b"{}")
    finally:
        await sender.close()
    assert (direct.kind, direct.status) == ("success", 200)
    assert proxied.error == "egress proxy: connection refused"
    assert [r.path for r in receiver.requests] == ["/demo/receiver"]


# -- the proxy's own failures -------------------------------------------------------------------


async def send_through(proxy_url: str, url: str, **options: Any) -> Any:
    sender = Sender(timeout=3, allowed=LOOPBACK, max_connections=2,
                    proxy=proxy_setting(proxy_url), **options)  # fmt: skip
    await sender.start()
    try:
        return await sender.send(url, "WD1", [], b"{}")
    finally:
        await sender.close()


async def test_each_proxy_failure_is_told_apart(receiver: Receiver, tmp_path: Path) -> None:
    nothing = f"http://127.0.0.1:{free_port()}"
    refused = await send_through(nothing, receiver.url())
    assert (refused.kind, refused.error) == ("connection_error", "egress proxy: connection refused")
    assert refused.proxy_failure and refused.status is None

    (tmp_path / "auth").mkdir()
    async with tinyproxy(tmp_path / "auth", basic_auth=True) as proxy:
        no_credentials = await send_through(proxy.url, receiver.url())
        tunnel = f"https://127.0.0.1:{receiver.port}/hook"
        no_credentials_tunnel = await send_through(proxy.url, tunnel)
        wrong = proxy.url.replace("http://", "http://dispatcher:wrong@")
        wrong_tunnel = await send_through(wrong, tunnel)
    assert (no_credentials.error, no_credentials.status) == ("egress proxy: HTTP 407", None)
    assert no_credentials_tunnel.error == "egress proxy: HTTP 407"
    # (tinyproxy answers wrong credentials with 401: a refused CONNECT all the same)
    assert wrong_tunnel.error == "egress proxy: CONNECT failed: HTTP 401"
    assert all(o.proxy_failure for o in (no_credentials, no_credentials_tunnel, wrong_tunnel))
    assert receiver.requests == []

    (tmp_path / "filtered").mkdir()
    # CONNECT only to port 443 and a closed one (the receiver's is another).
    closed = free_port()
    async with tinyproxy(tmp_path / "filtered", [443, closed]) as proxy:
        refused_tunnel = await send_through(proxy.url, f"https://127.0.0.1:{receiver.port}/hook")
        failed_tunnel = await send_through(proxy.url, f"https://127.0.0.1:{closed}/hook")
        # Nothing listens there: tinyproxy answers with an error page of its own.
        unreachable = await send_through(proxy.url, f"http://127.0.0.1:{closed}/hook")
        receiver.behaviours["/busy"] = answer(503)
        relayed = await send_through(proxy.url, receiver.url("/busy"))
    assert refused_tunnel.error == "egress proxy: CONNECT failed: HTTP 403"
    assert failed_tunnel.error == "egress proxy: CONNECT failed: HTTP 500"
    assert unreachable.error == "egress proxy: HTTP 500"
    assert all(o.proxy_failure for o in (refused_tunnel, failed_tunnel, unreachable))
    # The receiver's own 503, relayed (with Via): the receiver's failure, charged as ever.
    assert (relayed.kind, relayed.status, relayed.error) == ("http_error", 503, "HTTP 503")
    assert not relayed.proxy_failure


async def test_proxy_failures_follow_the_schedule_but_never_disable_the_endpoint(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: Any,
    db: Any,
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    # Two attempts, and no patience at all: a charged give-up would disable at once.
    nothing = f"http://127.0.0.1:{free_port()}"
    engine = await make_engine(
        egress_proxy=proxy_setting(nothing), retry_schedule=(1.0,), disable_after=0.0
    )
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    assert delivery["lastError"] == "egress proxy: connection refused"
    assert delivery["status"] == "pending"  # the schedule, as for any failure
    next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
    assert round((next_at - clock.now()).total_seconds()) == 1
    clock.set(next_at)
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert (delivery["status"], delivery["lastError"]) == (
        "failed",
        "egress proxy: connection refused",
    )
    attempts = (await get_json(client, ws, f"/v1/webhooks/{hook['id']}/attempts"))["data"]
    assert [(a["outcome"], a["error"], a["responseStatus"]) for a in attempts] == [
        ("connection_error", "egress proxy: connection refused", None)
    ] * 2
    webhook = await get_json(client, ws, f"/v1/webhooks/{hook['id']}")
    assert (webhook["disabledAt"], webhook["disabledReason"]) == (None, None)
    async with db.acquire() as conn:
        failing = await conn.fetchval(
            "SELECT failing_since FROM webhooks WHERE id = $1", hook["id"]
        )
    assert failing is None  # the failure clock never started
    assert receiver.requests == []


# -- the setting ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("https://proxy.internal:3128", "scheme must be http"),
        ("socks5://proxy.internal:1080", "scheme must be http"),
        ("http://proxy.internal", "port is missing"),
        ("http://:3128", "host is missing"),
        ("http://proxy.internal:99999", "port must be a number"),
        ("http://proxy.internal:3128/path", "nothing after the port"),
        (f"ftp://user:{PASSWORD}@proxy.internal:21", "scheme must be http"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable_never_the_value(
    raw: str, words: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"DISPATCHER_EGRESS_PROXY": raw})
    message = str(caught.value)
    assert "DISPATCHER_EGRESS_PROXY" in message and words in message
    assert PASSWORD not in message and raw not in message


def test_the_setting_reads_host_port_and_credentials() -> None:
    assert Settings.from_env({}).egress_proxy is None
    assert parse_egress_proxy("http://10.0.0.9:3128") == EgressProxy("10.0.0.9", 3128)
    proxy = parse_egress_proxy(f"http://ops%40corp:{PASSWORD}@proxy.internal:3128/")
    assert (proxy.host, proxy.port, proxy.user) == ("proxy.internal", 3128, "ops@corp")
    token = base64.b64encode(f"ops@corp:{PASSWORD}".encode()).decode()
    assert proxy.authorization == f"Basic {token}"
    assert proxy.url == "http://ops%40corp:***@proxy.internal:3128"
    assert PASSWORD not in repr(proxy)
    assert "DISPATCHER_EGRESS_PROXY" in known_variables()

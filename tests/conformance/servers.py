"""The real HTTP servers of the conformance suite, started on free loopback ports: Debian's
nginx (plain HTTP/1.1, and TLS 1.2 and TLS 1.3 with a self-signed certificate made here),
a Node.js `http` server (receiver.js), and the ASGI servers uvicorn and hypercorn serving
asgi_receiver.py. The servers are not written here: only the small applications behind them.

A server that is not installed skips its tests, saying how to install it, except in CI (the
`CI` variable set), where it fails them: CI installs every one (.ci/run, the `dev` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import wait_for

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def needs(program: str, install: str) -> str:
    """The path of `program`; else the test is skipped (failed in CI), saying how to get it."""
    found = shutil.which(program)
    if found is not None:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{program} is required in CI ({install}; .ci/run installs it)")
    pytest.skip(f"{program} not installed ({install})")


def needs_module(module: str, install: str) -> None:
    """The same for a Python module the `dev` extra installs."""
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is required in CI ({install})")
        pytest.skip(f"{module} not installed ({install})")


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports on 127.0.0.1 (held together while chosen: one at a time, the
    kernel may hand out the same one twice, and nginx would then serve two `listen`s on one)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    (port,) = free_ports(1)
    return port


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and localhost), signed by its own key, and the key: made
    with the openssl command line (Debian's openssl, which nginx depends on)."""
    openssl = needs("openssl", "apt-get install openssl")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@dataclass
class Server:
    """A server process on `port`, stopped by `stop` (or killed when it does not stop)."""

    name: str
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    def url(self, path: str, scheme: str = "http", port: int | None = None) -> str:
        return f"{scheme}://127.0.0.1:{port or self.port}{path}"

    async def until_listening(self, port: int | None = None) -> None:
        """Wait (20 s at most) until `port` accepts connections; fail at once, with the
        server's own words, should it exit."""

        async def listening() -> bool:
            if self.proc.returncode is not None:
                raise AssertionError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port or self.port)
            except OSError:
                return False
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True

        await wait_for(listening, within=20, interval=0.05, message=f"{self.name} listening")

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                async with asyncio.timeout(3):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def spawn(name: str, args: list[str], log: Path, port: int, **env: str) -> Server:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, **env}
        )
    return Server(name, proc, port, log)


@dataclass
class Receiver:
    """A receiver of ours on a real server (receiver.js or asgi_receiver.py): told each
    path's secret, asked what it saw."""

    server: Server

    def url(self, path: str) -> str:
        return self.server.url(path)

    async def secret(self, path: str, secret: str) -> None:
        async with aiohttp.ClientSession() as http:
            body = {"path": path, "secret": secret}
            async with http.post(self.url("/_control/secret"), json=body) as resp:
                assert resp.status == 204, await resp.text()

    async def all_stats(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(self.url("/_control/stats")) as resp:
            assert resp.status == 200, await resp.text()
            seen: dict[str, Any] = await resp.json()
        return seen

    async def stats(self, path: str) -> dict[str, Any]:
        """What it saw at `path`: requests, verified, rejected, sockets (that carried them),
        ids (the `webhook-id` of each verified request)."""
        seen: dict[str, dict[str, Any]] = (await self.all_stats())["paths"]
        empty = {"requests": 0, "verified": 0, "rejected": 0, "sockets": 0, "ids": []}
        return seen.get(path, empty)


async def start_node(folder: Path, keep_alive_ms: int | None = None) -> Server:
    """receiver.js on Node; `keep_alive_ms`: how long it keeps an idle connection (else
    Node's default, 5 s)."""
    node = needs("node", "apt-get install nodejs")
    port = free_port()
    args = [node, str(HERE / "receiver.js"), str(port)]
    args += [] if keep_alive_ms is None else [str(keep_alive_ms)]
    server = await spawn("node", args, folder / "node.log", port)
    await server.until_listening()
    return server


ASGI_SERVERS = ("uvicorn", "hypercorn")


async def start_asgi(kind: str, folder: Path) -> Server:
    """asgi_receiver.py served by `kind` (uvicorn or hypercorn), as a process of its own."""
    needs_module(kind, "pip install -e '.[dev]'")
    port = free_port()
    target = "tests.conformance.asgi_receiver:app"
    if kind == "uvicorn":
        args = ["-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port)]
        args += ["--log-level", "warning", "--lifespan", "off", "--timeout-graceful-shutdown", "1"]
    else:
        args = ["-m", "hypercorn", target, "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "1"]
    server = await spawn(kind, [sys.executable, *args], folder / f"{kind}.log", port)
    await server.until_listening()
    return server


# What nginx logs of each request: the connection's serial number and how many requests it
# has carried, the TLS version, the answer's status and framing.
NGINX_LOG_FORMAT = (
    "$connection $connection_requests $ssl_protocol $status $uri $sent_http_transfer_encoding"
)


@dataclass
class NginxLine:
    connection: int
    connection_requests: int
    tls: str  # "-" over plain HTTP
    status: int
    uri: str
    transfer_encoding: str  # "-" when not chunked


# nginx's listeners: plain HTTP, the same closing each connection after CAPPED_REQUESTS
# requests (`keepalive_requests`: its last answer says `Connection: close`), TLS 1.2 only,
# TLS 1.3 only.
LISTENERS = ("http", "http-capped", "tls1.2", "tls1.3")
CAPPED_REQUESTS = 5


@dataclass
class Nginx:
    """nginx on a port per listener (LISTENERS), the same locations on each. Webhooks to
    /signed/... are passed to the Node receiver (which checks signatures): nginx in front of
    an application, as receivers run it."""

    server: Server
    ports: dict[str, int]  # LISTENERS
    access_log: Path
    cert: Path

    def url(self, path: str, listener: str = "http") -> str:
        scheme = "https" if listener.startswith("tls") else "http"
        return self.server.url(path, scheme, self.ports[listener])

    def lines(self, uri_prefix: str) -> list[NginxLine]:
        found = []
        for line in self.access_log.read_text().splitlines():
            conn, reqs, tls, status, uri, framing = line.split(" ")
            if uri.startswith(uri_prefix):
                found.append(NginxLine(int(conn), int(reqs), tls, int(status), uri, framing))
        return found


def nginx_conf(folder: Path, ports: dict[str, int], upstream: int, cert: Path, key: Path) -> str:
    # Run as root (a container's CI), nginx would switch its workers to `nobody`, which can
    # read nothing under pytest's private temporary folders: the workers stay this user.
    user = f"user {getpass.getuser()};" if os.geteuid() == 0 else ""
    locations = f"""
        location /signed/ {{ proxy_pass http://127.0.0.1:{upstream}; }}
        location /chunked/ {{
            # `return` sets a Content-Length; sub_filter drops it (it may change the body):
            # the answer goes out chunked.
            default_type text/plain;
            sub_filter_types text/plain;
            sub_filter_once off;
            sub_filter "nothing" "nothing";
            return 200 "accepted, in chunks by nginx";
        }}
        location /status/500/ {{ return 500; }}
        location /status/503/ {{ default_type text/plain; return 503 "nginx says 503"; }}
        location /close/ {{ return 444; }}  # nginx closes the connection, answering nothing
    """
    tls = f"ssl_certificate {cert}; ssl_certificate_key {key};"
    return f"""
        {user}
        worker_processes 1;
        pid {folder}/nginx.pid;
        error_log stderr warn;
        events {{ worker_connections 512; }}
        http {{
            log_format conformance '{NGINX_LOG_FORMAT}';
            access_log {folder}/access.log conformance;
            client_body_temp_path {folder}/body;
            proxy_temp_path {folder}/proxy;
            fastcgi_temp_path {folder}/fastcgi;
            uwsgi_temp_path {folder}/uwsgi;
            scgi_temp_path {folder}/scgi;
            keepalive_timeout 60s;
            keepalive_requests 1000;
            server {{ listen 127.0.0.1:{ports["http"]}; {locations} }}
            server {{
                listen 127.0.0.1:{ports["http-capped"]};
                keepalive_requests {CAPPED_REQUESTS}; {locations}
            }}
            server {{
                listen 127.0.0.1:{ports["tls1.2"]} ssl; {tls} ssl_protocols TLSv1.2; {locations}
            }}
            server {{
                listen 127.0.0.1:{ports["tls1.3"]} ssl; {tls} ssl_protocols TLSv1.3; {locations}
            }}
        }}
    """


async def start_nginx(folder: Path, upstream: int) -> Nginx:
    nginx = needs("nginx", "apt-get install nginx")
    cert, key = self_signed(folder)
    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
    conf = folder / "nginx.conf"
    conf.write_text(nginx_conf(folder, ports, upstream, cert, key))
    args = [nginx, "-c", str(conf), "-p", str(folder), "-e", "stderr"]
    server = await spawn("nginx", [*args, "-g", "daemon off;"], folder / "nginx.log", ports["http"])
    for port in ports.values():
        await server.until_listening(port)
    return Nginx(server, ports, folder / "access.log", cert)

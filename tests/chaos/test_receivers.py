"""Receivers that misbehave: each ends in the right record, and the engine stays healthy."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import only_delivery, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def reset_before_answer(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.transport.abort()
    return web.Response(status=200)


async def reset_mid_body(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Length": "100000"})
    await response.prepare(request)
    await response.write(b"x" * 1000)
    assert request.transport is not None
    request.transport.abort()
    return response


async def slow_drip(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Length": "1000"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
        for _ in range(50):  # one byte every 100 ms: 5 s, far past the 1 s timeout
            await response.write(b"x")
            await asyncio.sleep(0.1)
    return response


async def ten_megabytes(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200)
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
        for _ in range(160):
            await response.write(b"y" * 65536)
    return response


CASES: dict[str, tuple[Any, str, str | None]] = {
    # path: (behaviour, expected status after one attempt, expected lastError)
    "/500": (answer(500), "pending", "HTTP 500"),
    "/429": (answer(429, {"Retry-After": "60"}), "pending", "HTTP 429"),
    "/reset": (reset_before_answer, "pending", "connection closed before a response"),
    "/midbody": (reset_mid_body, "pending", "response interrupted"),
    "/drip": (slow_drip, "pending", "timeout after 1s"),
    "/hang": (None, "pending", "timeout after 1s"),
    "/huge": (ten_megabytes, "delivered", None),
    "/redirect": (answer(307, {"Location": "/elsewhere"}), "pending",
                  "HTTP 307 (redirects are not followed)"),
}  # fmt: skip


async def test_each_misbehaviour_ends_in_the_right_record(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    hooks = {}
    for path, (behaviour, _, _) in CASES.items():
        receiver.behaviours[path] = behaviour or receiver.hang
        hooks[path] = (await subscribe(client, ws, receiver.url(path)))["id"]
    rss_before = rss_kib()
    await publish(client, ws)
    engine = await make_engine(request_timeout=1.0)
    for path, (_, status, error) in CASES.items():

        async def attempted(hook: str = hooks[path]) -> bool:
            return bool((await only_delivery(client, ws, hook))["attempts"] == 1)

        await wait_for(attempted, message=path)
        delivery = await only_delivery(client, ws, hooks[path])
        assert (delivery["status"], delivery["lastError"]) == (status, error), path
    assert receiver.at("/elsewhere") == []
    await wait_for(lambda: engine.in_flight == 0, message="nothing left in flight")
    assert engine.running
    # 10 MB answers were cut at 64 KiB: memory did not grow by anything like that.
    assert rss_kib() - rss_before < 20 * 1024


async def test_tls_endpoint_with_a_bad_certificate(
    client: TestClient[Any, Any], ws: Workspace, make_engine: EngineFactory, tmp_path: Path
) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    openssl = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await asyncio.wait_for(openssl.wait(), timeout=60) == 0
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        hook = await subscribe(client, ws, f"https://127.0.0.1:{port}/hook")
        await publish(client, ws)
        await make_engine()

        async def attempted() -> bool:
            return bool((await only_delivery(client, ws, hook["id"]))["attempts"] == 1)

        await wait_for(attempted)
        delivery = await only_delivery(client, ws, hook["id"])
        assert delivery["lastError"] == "TLS certificate verification failed"
        assert delivery["responseStatus"] is None
        assert seen == []
    finally:
        await runner.cleanup()

"""Requests aiohttp's own parser refuses (before any middleware runs) still get the one JSON
error shape and a request id; an ambiguous Authorization (sent twice) is refused."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def exchange(port: int, request: bytes) -> RawAnswer:
    """Send bytes as they are (no client would send these) and read the answer to EOF."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawAnswer(int(status_line.split()[1]), headers, body)


LONG = b"a" * 9000
MALFORMED: list[tuple[str, bytes]] = [
    ("unknown method", b"BREW /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("unknown method, no route", b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("header over 8190 bytes", b"GET /v1/messages HTTP/1.1\r\nHost: x\r\nX-Long: " + LONG
     + b"\r\n\r\n"),
    ("authorization over 8190 bytes", b"GET /v1/messages HTTP/1.1\r\nHost: x\r\n"
     b"Authorization: Bearer " + LONG + b"\r\n\r\n"),
    ("request line over 8190 bytes", b"GET /v1/messages?" + LONG + b" HTTP/1.1\r\n"
     b"Host: x\r\n\r\n"),
    ("too many headers", b"GET /v1/messages HTTP/1.1\r\nHost: x\r\n"
     + b"".join(b"X-H%d: 1\r\n" % i for i in range(200)) + b"\r\n"),
    ("header name with a space", b"GET /v1/messages HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n"),
    ("unknown HTTP version", b"GET /v1/messages HTTP/9.9\r\nHost: x\r\n\r\n"),
    ("not HTTP at all", b"hello there\r\n\r\n"),
    ("TLS on the plain port", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40),
    ("two Content-Length", b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Content-Length: 3\r\n\r\n{}"),
    ("broken chunked body", b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "request_bytes"), MALFORMED, ids=[c for c, _ in MALFORMED])
async def test_parser_refusals_get_the_error_shape(
    client: TestClient[Any, Any], case: str, request_bytes: bytes
) -> None:
    assert client.port is not None
    answer = await exchange(client.port, request_bytes)
    assert answer.status == 400, (case, answer)
    assert answer.headers["content-type"].startswith("application/json"), (case, answer)
    body = answer.json()
    assert body["status"] == 400 and body["code"] == "bad_request", body
    assert body["title"] == "Bad Request" and body["message"], body
    trace = answer.headers["x-request-id"]
    assert body["trace"] == trace and len(trace) >= 8
    # The answer never echoes what was sent (a key in an over-long header, for one).
    assert b"aaaaaaaa" not in answer.body


async def test_refusals_are_traced_apart_and_the_service_goes_on(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    assert client.port is not None
    traces = [(await exchange(client.port, raw)).headers["x-request-id"] for _, raw in MALFORMED]
    assert len(set(traces)) == len(MALFORMED)
    # PROPFIND is valid HTTP: it reaches the routes and is their 405, as any other method.
    answer = await exchange(
        client.port, b"PROPFIND /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert answer.status == 405
    assert answer.json()["code"] == "method_not_allowed"
    assert answer.json()["trace"] == answer.headers["x-request-id"]
    resp = await client.get("/v1/messages", headers=ws.headers)
    assert resp.status == 200


def two(first: str, second: str) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("Authorization", first)
    headers.add("Authorization", second)
    return headers


async def test_two_authorization_headers_are_refused(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    other = await make_workspace()
    mine, theirs = f"Bearer {ws.key}", f"Bearer {other.key}"
    body = {"url": "https://hooks.example.com/", "events": ["call.missed"]}
    for first, second in (
        (mine, theirs),
        (mine, mine),
        (mine, "Bearer dk_wrong"),
        ("Bearer dk_wrong", mine),
        ("Basic eDp5", mine),
        ("", mine),
    ):
        for method, path in (("POST", "/v1/webhooks"), ("GET", "/v1/webhooks"),
                             ("POST", "/v1/events")):  # fmt: skip
            resp = await client.request(
                method, path, json=body if method == "POST" else None, headers=two(first, second)
            )
            assert resp.status == 400, (first, second, path, await resp.text())
            error = await resp.json()
            assert error["code"] == "validation_error"
            assert [e["path"] for e in error["errors"]] == ["header.Authorization"]
            assert ws.key not in await resp.text() and other.key not in await resp.text()
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM webhooks") == 0
        assert await conn.fetchval("SELECT count(*) FROM events") == 0


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/events?%3Cscript%3Ealert(1)%3C%2Fscript%3E=1", None),
        ("GET", "/v1/webhooks?limit=%3Cb%3E", None),
        ("POST", "/v1/webhooks", {"<img src=x onerror=alert(1)>": 1, "url": "https://x.test/"}),
        ("DELETE", "/v1/webhooks/WH%3Cscript%3E", None),
        ("GET", "/v1/%3Cscript%3E", None),
    ],
)
async def test_no_error_answer_reads_as_markup(
    client: TestClient[Any, Any], ws: Workspace, method: str, path: str, body: Any
) -> None:
    """Whatever a client sends that an error quotes back (a name, a value, a path), every
    error answer is JSON, `nosniff`, and holds no byte that could open markup."""
    resp = await client.request(method, path, json=body, headers=ws.headers)
    assert resp.status >= 400
    assert resp.content_type == "application/json"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    raw = await resp.read()
    for char in (b"<", b">", b"&", b"'"):
        assert char not in raw, raw
    assert (await resp.json())["status"] == resp.status

"""The lean HTTP/1.1 client behind `Sender`, against real servers on loopback.

A scripted raw server answers with exactly the bytes a case needs (whole, or one byte at a
time so that every parser state is crossed), so each framing, failure and pool rule is
checked on the wire. aiohttp's client is the reference: the same answers read by both agree
(a differential test), and the request written is the one aiohttp writes. Real faults at
each stage (resolve, connect, send, read) come from servers that misbehave (refuse, black-hole,
close, cut, answer garbage; exceptions of unexpected types are tests/engine/test_faults.py's),
and the main cases run again on uvloop, which the worker uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from dispatcher import __version__
from dispatcher.engine import http1
from dispatcher.engine.http1 import Http1Client, RequestFailed
from dispatcher.engine.sender import Outcome, Sender
from tests.conftest import wait_for
from tests.engine.faults import TECHNICAL
from tests.receiver import Receiver

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"type":"contact.updated","data":{"id":"CT1"}}'
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


# -- a scripted server ------------------------------------------------------------------------


@dataclass
class Call:
    """One request as the server read it."""

    connection: int  # 1, 2, ... in the order connections were accepted
    index: int  # 0, 1, ... on its connection
    raw: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


Script = Callable[[Call], Awaitable[bool]]  # False: close the connection after this one


@dataclass
class RawServer:
    """Reads HTTP/1.1 requests (head + Content-Length body) and lets a script answer."""

    script: Script
    host: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    peak: int = 0
    server: asyncio.Server | None = None
    writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def url(self, path: str = "/hook") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.transport.abort()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        self.open += 1
        self.peak = max(self.peak, self.open)
        self.writers.add(writer)
        try:
            for index in range(1000):
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                raw = head + await reader.readexactly(length)
                call = Call(connection, index, raw, reader, writer)
                self.calls.append(call)
                if not await self.script(call):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            self.open -= 1
            self.writers.discard(writer)
            writer.transport.abort()


def answer(payload: bytes, *, drip: bool = False, keep: bool = True) -> Script:
    """Write `payload` (one byte at a time when `drip`), then keep or close the connection."""

    async def script(call: Call) -> bool:
        if drip:
            for i in range(len(payload)):
                call.writer.write(payload[i : i + 1])
                await call.writer.drain()
                await asyncio.sleep(0)
        else:
            call.writer.write(payload)
            await call.writer.drain()
        return keep

    return script


async def hang(call: Call) -> bool:
    """Never answer; end when the client goes away."""
    with contextlib.suppress(ConnectionError):
        await call.reader.read(1)
    return False


@contextlib.asynccontextmanager
async def lean(**options: Any) -> AsyncIterator[Sender]:
    settings: dict[str, Any] = {"timeout": 2.0, "allowed": LOOPBACK, "max_connections": 10}
    sender = Sender(**{**settings, **options})
    await sender.start()
    try:
        yield sender
    finally:
        await sender.close()


async def send(sender: Sender, url: str) -> Outcome:
    return await sender.send(url, "WD1", [SECRET], BODY)


def pool(sender: Sender) -> Http1Client:
    assert sender._client is not None, "the lean client"
    return sender._client


class ScriptedResolver(AbstractResolver):
    """Answers from a script (an aiohttp resolver, as tests/security/test_ssrf.py passes)."""

    def __init__(self, *answers: list[str], error: BaseException | None = None) -> None:
        self.answers = list(answers)
        self.error = error
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups += 1
        if self.error is not None:
            raise self.error
        answer = self.answers[min(self.lookups - 1, len(self.answers) - 1)]
        return [
            ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0)
            for a in answer
        ]

    async def close(self) -> None:
        pass


# -- answers: framing, status, failures ----------------------------------------------------

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
ANSWERS: dict[str, tuple[bytes, tuple[str, int | None, str | None, str | None]]] = {
    # name: (bytes the server writes, then closes; (kind, status, error, retry_after))
    "length": (OK, ("success", 200, None, None)),
    "no body": (b"HTTP/1.1 204 No Content\r\n\r\n", ("success", 204, None, None)),
    "no reason": (b"HTTP/1.1 202\r\nContent-Length: 0\r\n\r\n", ("success", 202, None, None)),
    "chunked": (
        CHUNKED + b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        ("success", 200, None, None),
    ),
    "until close": (b"HTTP/1.1 200 OK\r\n\r\nall of it", ("success", 200, None, None)),
    "HTTP/1.0": (b"HTTP/1.0 200 OK\r\n\r\nold", ("success", 200, None, None)),
    "bare LF": (b"HTTP/1.1 200 OK\nContent-Length: 1\n\nx", ("success", 200, None, None)),
    "interim": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK,
        ("success", 200, None, None),
    ),
    "503 retry": (
        b"HTTP/1.1 503 Busy\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",
        ("http_error", 503, "HTTP 503", "120"),
    ),
    "429 date": (
        b"HTTP/1.1 429 Slow\r\nretry-after:  Wed, 21 Oct 2099 07:28:00 GMT \r\n"
        b"Content-Length: 0\r\n\r\n",
        ("http_error", 429, "HTTP 429", "Wed, 21 Oct 2099 07:28:00 GMT"),
    ),
    "redirect": (
        b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
        ("http_error", 302, "HTTP 302 (redirects are not followed)", None),
    ),
    "closed": (b"", ("connection_error", None, "connection closed before a response", None)),
    "half a head": (
        b"HTTP/1.1 200 OK\r\nContent-Le",
        ("connection_error", None, "connection closed before a response", None),
    ),
    "short body": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        ("connection_error", None, "response interrupted", None),
    ),
    "cut chunk": (
        CHUNKED + b"5\r\nhel",
        ("connection_error", None, "response interrupted", None),
    ),
    "bad chunk size": (
        CHUNKED + b"zz\r\nhello\r\n0\r\n\r\n",
        ("connection_error", None, "response interrupted", None),
    ),
}
INVALID = ("connection_error", None, "connection error: the response was not valid HTTP", None)
MALFORMED: dict[str, bytes] = {
    # aiohttp records these as "response interrupted"
    "not HTTP": b"garbage\r\n\r\n",
    "HTTP/2": b"HTTP/2 200\r\nContent-Length: 0\r\n\r\n",
    "bad status": b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    "status 0xx": b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
    "no colon": b"HTTP/1.1 200 OK\r\nnonsense\r\nContent-Length: 0\r\n\r\n",
    "bad length": b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
    "two lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "huge head": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n",
}


def expected(outcome: Outcome) -> tuple[str, int | None, str | None, str | None]:
    return outcome.kind, outcome.status, outcome.error, outcome.retry_after


@pytest.mark.parametrize("drip", [False, True], ids=["whole", "byte by byte"])
@pytest.mark.parametrize("name", list(ANSWERS) + list(MALFORMED))
async def test_each_answer_gives_its_outcome(name: str, drip: bool) -> None:
    payload, want = ANSWERS[name] if name in ANSWERS else (MALFORMED[name], INVALID)
    if drip and len(payload) > 1024:
        pytest.skip("too long to send a byte at a time")
    script = answer(payload, drip=drip, keep=False)
    async with RawServer(script) as server, lean(timeout=1.0) as sender:
        assert expected(await send(sender, server.url())) == want
        # The server closed each connection: the pool noticed, idle or not.
        await wait_for(lambda: pool(sender).open_connections == 0, within=2)


# -- Transfer-Encoding and Content-Length ----------------------------------------------------

Framing = tuple[str, str | None, bool]  # (kind or error, excerpt, connection reused)
TE_CL: dict[str, tuple[bytes, bytes, Framing]] = {
    # name: (header lines, body as sent, then (what the client makes of it, the body it read,
    # whether the connection carried the next request)). RFC 9112, 6.1 and 6.3: chunked wins
    # over Content-Length, and such an answer's connection is not used again; another final
    # coding reads until close; a Content-Length that is not one decimal number is refused.
    "Content-Length": (b"Content-Length: 5\r\n", b"hello", ("success", "hello", True)),
    "Content-Length with spaces": (
        b"Content-Length:  5 \r\n",
        b"hello",
        ("success", "hello", True),
    ),
    "the same Content-Length twice": (
        b"Content-Length: 5\r\nContent-Length: 5\r\n",
        b"hello",
        ("success", "hello", True),
    ),
    "chunked": (
        b"Transfer-Encoding: chunked\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", True),
    ),
    "Chunked, any case": (
        b"transfer-encoding: ChUnKeD\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", True),
    ),
    "gzip, chunked": (
        b"Transfer-Encoding: gzip, chunked\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", True),  # the coded bytes as they came: never decoded
    ),
    "two Transfer-Encoding lines, chunked last": (
        b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", True),
    ),
    "chunked and Content-Length": (
        b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", False),
    ),
    "Content-Length and chunked": (
        b"Content-Length: 100\r\nTransfer-Encoding: chunked\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        ("success", "hello", False),
    ),
    "neither: until close": (b"", b"hello", ("success", "hello", False)),
    "gzip only: until close": (
        b"Transfer-Encoding: gzip\r\n",
        b"hello",
        ("success", "hello", False),
    ),
    "chunked, gzip: until close": (
        b"Transfer-Encoding: chunked, gzip\r\n",
        b"hello",
        ("success", "hello", False),
    ),
    "gzip and Content-Length: until close": (
        b"Transfer-Encoding: gzip\r\nContent-Length: 3\r\n",
        b"hello",
        ("success", "hello", False),
    ),
    "Content-Length shorter than the body": (
        b"Content-Length: 3\r\n",
        b"hello",
        ("success", "hel", False),  # bytes after the answer: out of step, not reused
    ),
    "Content-Length longer than the body": (
        b"Content-Length: 10\r\n",
        b"hello",
        ("response interrupted", None, False),
    ),
    "chunked, but the body is not": (
        b"Transfer-Encoding: chunked\r\n",
        b"hello",
        ("response interrupted", None, False),
    ),
    "two different Content-Lengths": (
        b"Content-Length: 5\r\nContent-Length: 6\r\n",
        b"hello",
        ("connection error: the response was not valid HTTP", None, False),
    ),
    "a list of Content-Lengths": (
        b"Content-Length: 5, 5\r\n",
        b"hello",
        (INVALID[2] or "", None, False),
    ),
    "Content-Length -1": (b"Content-Length: -1\r\n", b"hello", (INVALID[2] or "", None, False)),
    "Content-Length +5": (b"Content-Length: +5\r\n", b"hello", (INVALID[2] or "", None, False)),
    "Content-Length 0x5": (b"Content-Length: 0x5\r\n", b"hello", (INVALID[2] or "", None, False)),
    "Content-Length empty": (b"Content-Length: \r\n", b"hello", (INVALID[2] or "", None, False)),
    "a bad Content-Length beside chunked": (
        b"Transfer-Encoding: chunked\r\nContent-Length: x\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        (INVALID[2] or "", None, False),
    ),
}


@pytest.mark.parametrize("name", list(TE_CL))
async def test_transfer_encoding_and_content_length(name: str) -> None:
    """Each combination of the two headers, and what the client makes of it (the table of
    docs/delivery.md, "Framing")."""
    lines, body, (want, excerpt, reused) = TE_CL[name]
    payload = b"HTTP/1.1 200 OK\r\n" + lines + b"\r\n" + body
    script = answer(payload, keep=reused)  # closed after the answer unless it is reused
    async with RawServer(script) as server, lean(timeout=1.0, excerpt_bytes=100) as sender:
        first = await send(sender, server.url())
        assert (first.kind if first.succeeded else first.error) == want, first
        assert first.response_body == excerpt
        if first.succeeded:
            assert (await send(sender, server.url())).succeeded
            assert server.connections == (1 if reused else 2)


# -- aiohttp's client as the reference -----------------------------------------------------------

Read = tuple[str, int | None, str | None, bytes | None]  # ("answer", status, Retry-After, body)


async def read_by_aiohttp(url: str, headers: dict[str, str], body: bytes, **options: Any) -> Read:
    """What aiohttp's client makes of the answer to one POST: as the sender set it up before
    the lean client was its only one (no proxy from the environment, no decompression, no
    Accept-Encoding, redirects not followed)."""
    connector = aiohttp.TCPConnector(limit=10, **options)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=1.0),
        trust_env=False,
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    ) as session:
        try:
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                content = await response.read()
                return ("answer", response.status, response.headers.get("Retry-After"), content)
        except (aiohttp.ClientError, TimeoutError):
            return ("failed", None, None, None)


async def read_by_lean(url: str) -> Read:
    client = Http1Client(timeout=1.0, allowed=LOOPBACK, max_connections=1, excerpt_bytes=1 << 20)
    try:
        response = await client.post(url, b"", BODY)
    except (RequestFailed, TimeoutError):
        return ("failed", None, None, None)
    finally:
        await client.close()
    return ("answer", response.status, response.retry_after, response.excerpt)


# Where the lean client reads an answer otherwise than aiohttp, on purpose: (lean, aiohttp).
# Where the lean client reads an answer aiohttp refuses, its connection is never used again.
FAILED: Read = ("failed", None, None, None)
HELLO: Read = ("answer", 200, None, b"hello")
DIFFERENCES: dict[str, tuple[Read, Read]] = {
    # A status is three digits from 100 to 599 (RFC 9110, 15); aiohttp takes 099 as one.
    "status 0xx": (FAILED, ("answer", 99, None, b"")),
    # RFC 9110, 8.6: a recipient may take the same Content-Length repeated as one.
    "the same Content-Length twice": (HELLO, FAILED),
    # RFC 9112, 6.3: Transfer-Encoding overrides Content-Length (and the connection closes).
    "chunked and Content-Length": (HELLO, FAILED),
    "Content-Length and chunked": (HELLO, FAILED),
    "gzip and Content-Length: until close": (HELLO, FAILED),
    # The answer is what its Content-Length says; the bytes after it close the connection.
    "Content-Length shorter than the body": (("answer", 200, None, b"hel"), FAILED),
}


def payload_of(name: str) -> bytes:
    if name in ANSWERS:
        return ANSWERS[name][0]
    if name in MALFORMED:
        return MALFORMED[name]
    lines, body, _ = TE_CL[name]
    return b"HTTP/1.1 200 OK\r\n" + lines + b"\r\n" + body


@pytest.mark.parametrize("name", [*ANSWERS, *MALFORMED, *TE_CL])
async def test_the_lean_client_reads_each_answer_as_aiohttp_does(name: str) -> None:
    """A differential test: the same bytes, read by both clients, give the same status,
    Retry-After and body, or a failure for both (but for the DIFFERENCES, each explained)."""
    async with RawServer(answer(payload_of(name), keep=False)) as server:
        reference = await read_by_aiohttp(server.url(), {}, BODY)
        lean_read = await read_by_lean(server.url())
    if name in DIFFERENCES:
        assert (lean_read, reference) == DIFFERENCES[name]
    else:
        assert lean_read == reference


async def test_the_request_is_what_aiohttp_sends() -> None:
    """Byte for byte but for the order of the headers: request target and Host as yarl makes
    them (an IDN host in A-labels, dot segments resolved, %7e unquoted, no fragment)."""
    async with RawServer(answer(OK)) as server:
        url = f"http://bücher.test:{server.port}/a/../b?x=%7e&y=é#fragment"
        heads = []
        async with lean(resolver=ScriptedResolver(["127.0.0.1"]), wall_clock=lambda: 1.8e9
                        ) as sender:  # fmt: skip
            outcome = await send(sender, url)
            assert outcome.kind == "success", outcome
            reference_headers = {**sender.headers("WD1", [SECRET], BODY), "Accept": "*/*"}
        reference = await read_by_aiohttp(
            url, reference_headers, BODY, resolver=ScriptedResolver(["127.0.0.1"])
        )
        assert reference[:2] == ("answer", 200)
        for call in server.calls:
            head, _, body = call.raw.partition(b"\r\n\r\n")
            assert body == BODY
            request_line, *lines = head.decode().split("\r\n")
            heads.append((request_line, sorted(lines)))
    assert len(heads) == 2
    assert heads[0] == heads[1]
    request_line, lines = heads[0]
    assert request_line == "POST /b?x=~&y=%C3%A9 HTTP/1.1"
    assert f"Host: xn--bcher-kva.test:{server.port}" in lines
    assert f"User-Agent: dispatcher/{__version__}" in lines
    assert "Content-Type: application/json" in lines
    assert f"Content-Length: {len(BODY)}" in lines
    assert "webhook-id: WD1" in lines
    assert "webhook-timestamp: 1800000000" in lines


# -- custom headers ----------------------------------------------------------------------------

CUSTOM = [("X-Tenant", "acme"), ("Authorization", "Bearer s3cr3t-value"), ("X-Empty", "")]


async def test_custom_headers_follow_ours_one_line_each() -> None:
    async with RawServer(answer(OK)) as server, lean() as sender:
        outcome = await sender.send(server.url(), "WD1", [SECRET], BODY, CUSTOM)
        assert outcome.kind == "success", outcome
        head = server.calls[-1].raw.partition(b"\r\n\r\n")[0].decode()
    lines = head.split("\r\n")[1:]
    names = [line.split(":", 1)[0].lower() for line in lines]
    assert len(names) == len(set(names)), lines  # no header twice
    for name, value in CUSTOM:
        assert f"{name}: {value}" in lines, lines
    assert "Accept: */*" in lines
    # ours first, then the custom ones, then Accept
    assert names == ["host", "content-type", "user-agent", "content-length", "webhook-id",
                     "webhook-timestamp", "webhook-signature", "x-tenant", "authorization",
                     "x-empty", "accept"]  # fmt: skip


async def test_a_custom_accept_replaces_ours() -> None:
    async with RawServer(answer(OK)) as server, lean() as sender:
        custom = [("accept", "application/json")]
        assert (await sender.send(server.url(), "WD1", [SECRET], BODY, custom)).succeeded
        head = server.calls[-1].raw.partition(b"\r\n\r\n")[0].decode().lower()
    assert head.count("\r\naccept:") == 1
    assert "\r\naccept: application/json" in head


# Headers a stored row could hold had it skipped the API: none is ever written.
UNSENDABLE = [
    [("X-A", "s3cr3t\r\nX-Injected: 1")],
    [("X-A", "s3cr3t\nX-Injected: 1")],
    [("X-A", "s3cr3t\rX")],
    [("X-A", "s3cr3t\x00")],
    [("X-A", "s3cr3t\u00e9")],
    [("X-A", "s3cr3t\u2028X-Injected: 1")],
    [("X-A\r\nX-Injected", "1")],
    [("X-A: 1\r\nX-B", "1")],
    [("", "1")],
    [("Content-Type", "text/plain")],
    [("content-length", "0")],
    [("Transfer-Encoding", "chunked")],
    [("Host", "evil.example.com")],
    [("webhook-id", "forged")],
    [("Webhook-Signature", "v1,forged")],
    [("X-Ok", "fine"), ("User-Agent", "forged")],
]


@pytest.mark.parametrize("custom", UNSENDABLE, ids=repr)
async def test_a_header_that_breaks_a_rule_is_never_written(custom: list[tuple[str, str]]) -> None:
    async with RawServer(answer(OK)) as server, lean() as sender:
        outcome = await sender.send(server.url(), "WD1", [SECRET], BODY, custom)
        assert server.calls == [] and server.connections == 0
    assert outcome.kind == "connection_error"
    assert outcome.error is not None
    assert outcome.error.startswith("the webhook's custom headers cannot be sent: "), outcome
    assert "s3cr3t" not in outcome.error and "forged" not in outcome.error
    assert not TECHNICAL.search(outcome.error), outcome.error


@pytest.mark.parametrize(
    "fields",
    [
        [("X-A", "a\r\nX-Injected: 1")],
        [("X-A", "a\n")],
        [("X-A", "a\r")],
        [("X-A", "\x00")],
        [("X-A", "\x7f")],
        [("X-A", "\u00e9")],
        [("X-A", "\udc80")],
        [("X-A\r\nX-B", "1")],
        [("X A", "1")],
        [("X:A", "1")],
        [("", "1")],
        [("\u0425", "1")],
    ],
    ids=repr,
)
def test_the_writer_refuses_what_would_break_a_line(fields: list[tuple[str, str]]) -> None:
    """The writer's own guard, whatever checked the headers before it."""
    with pytest.raises(http1.InvalidHeader) as refused:
        http1.header_lines(fields)
    assert "Injected" not in str(refused.value)


def test_the_writer_writes_one_line_per_field() -> None:
    fields = [("X-A", "a b\tc"), ("X-B", ""), ("!#$%&'*+-.^_`|~", "!~")]
    assert http1.header_lines(fields) == b"X-A: a b\tc\r\nX-B: \r\n!#$%&'*+-.^_`|~: !~\r\n"


# -- the pool --------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection() -> None:
    async with RawServer(answer(OK)) as server, lean() as sender:
        for _ in range(5):
            assert (await send(sender, server.url())).kind == "success"
        assert server.connections == 1
        assert pool(sender).open_connections == 1


@pytest.mark.parametrize(
    "payload",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + b"x" * 70000,  # cut at 64 KiB
        OK + b"HTTP/1.1 200 OK\r\n",  # bytes after the answer: out of step
    ],
    ids=["Connection: close", "HTTP/1.0", "cut at 64 KiB", "extra bytes"],
)
async def test_a_connection_is_not_reused_after(payload: bytes) -> None:
    async with RawServer(answer(payload)) as server, lean() as sender:
        for _ in range(3):
            assert (await send(sender, server.url())).kind == "success"
        assert server.connections == 3


async def test_a_body_of_exactly_64_kib_is_read_and_the_connection_kept() -> None:
    payload = b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + b"x" * 65536
    async with RawServer(answer(payload)) as server, lean() as sender:
        for _ in range(3):
            assert (await send(sender, server.url())).kind == "success"
        assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_used() -> None:
    async def answer_then_close_soon(call: Call) -> bool:
        call.writer.write(OK)
        await call.writer.drain()
        await asyncio.sleep(0.05)
        return False  # closed while the client holds it idle

    async with RawServer(answer_then_close_soon) as server, lean() as sender:
        assert (await send(sender, server.url())).kind == "success"
        await wait_for(lambda: pool(sender).open_connections == 0, message="the close seen")
        assert (await send(sender, server.url())).kind == "success"
        assert server.connections == 2 and len(server.calls) == 2


async def test_a_request_crossing_the_servers_close_is_sent_once_more() -> None:
    """The server closes an idle connection just as the next request arrives on it (as a
    keep-alive timeout does): never answered, so sent again on a new connection."""

    async def first_only(call: Call) -> bool:
        if call.index == 0:
            call.writer.write(OK)
            return True
        return False  # the second request on a connection: closed unanswered

    async with RawServer(first_only) as server, lean() as sender:
        for _ in range(3):
            assert (await send(sender, server.url())).kind == "success"
        assert server.connections == 3
        assert [(c.connection, c.index) for c in server.calls] == [
            (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
        ]  # fmt: skip


async def test_only_once_more_and_only_on_a_reused_connection() -> None:
    answered = True

    async def switch(call: Call) -> bool:
        if answered:
            call.writer.write(OK)
            return True
        return False

    async with RawServer(switch) as server, lean() as sender:
        assert (await send(sender, server.url())).kind == "success"
        answered = False
        outcome = await send(sender, server.url())
        assert outcome.error == "connection closed before a response"
        assert server.connections == 2  # the reused one, then one new: no third try
        outcome = await send(sender, server.url())  # a new connection: no retry at all
        assert outcome.error == "connection closed before a response"
        assert server.connections == 3


async def test_no_retry_once_the_answer_started() -> None:
    async def half(call: Call) -> bool:
        if call.index == 0:
            call.writer.write(OK)
            return True
        call.writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await call.writer.drain()
        return False

    async with RawServer(half) as server, lean() as sender:
        assert (await send(sender, server.url())).kind == "success"
        assert (await send(sender, server.url())).error == "response interrupted"
        assert server.connections == 1


async def test_at_most_max_connections_are_open() -> None:
    async def slow(call: Call) -> bool:
        await asyncio.sleep(0.05)
        call.writer.write(OK)
        return True

    async with RawServer(slow) as server, lean(max_connections=2) as sender:
        outcomes = await asyncio.gather(*(send(sender, server.url()) for _ in range(10)))
        assert {o.kind for o in outcomes} == {"success"}
        assert server.peak == 2 and server.connections == 2
        assert pool(sender).open_connections == 2


async def test_an_idle_connection_elsewhere_gives_way() -> None:
    async with (
        RawServer(answer(OK)) as first,
        RawServer(answer(OK)) as second,
        lean(max_connections=1) as sender,
    ):
        assert (await send(sender, first.url())).kind == "success"
        assert first.open == 1
        assert (await send(sender, second.url())).kind == "success"
        await wait_for(lambda: first.open == 0, message="the first one closed")
        assert second.open == 1
        assert pool(sender).open_connections == 1


async def test_waiting_for_room_counts_in_the_timeout() -> None:
    """The second request waits for the one connection the first holds; its wait is part of
    its 0.3 s, so it ends when its own 0.3 s do (a wait outside the timeout would end at
    0.6 s or later). It may still connect in the moment between the first's timeout freeing
    the room and its own: a race with no wrong outcome, so the count of connections is not
    asserted."""
    async with RawServer(hang) as server, lean(max_connections=1, timeout=0.3) as sender:
        outcomes = await asyncio.gather(send(sender, server.url()), send(sender, server.url()))
        assert [o.error for o in outcomes] == ["timeout after 0.3s"] * 2
        assert all(o.elapsed_ms < 600 for o in outcomes), [o.elapsed_ms for o in outcomes]
        assert 1 <= server.connections <= 2
        assert pool(sender).open_connections == 0


async def test_a_timeout_closes_the_connection() -> None:
    async with RawServer(hang) as server, lean(timeout=0.2) as sender:
        outcome = await send(sender, server.url())
        assert (outcome.kind, outcome.error) == ("timeout", "timeout after 0.2s")
        assert outcome.elapsed_ms >= 200
        assert pool(sender).open_connections == 0
        await wait_for(lambda: server.open == 0, message="the server saw the close")


async def test_cancellation_escapes_and_closes_the_connection() -> None:
    async with RawServer(hang) as server, lean() as sender:
        task = asyncio.create_task(send(sender, server.url()))
        await wait_for(lambda: len(server.calls) == 1, message="the request is in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool(sender).open_connections == 0


async def test_after_close_nothing_is_sent() -> None:
    async with RawServer(answer(OK)) as server:
        client = Http1Client(timeout=1, allowed=LOOPBACK, max_connections=1)
        await client.post(server.url(), b"", b"{}")
        await client.close()
        with pytest.raises(RequestFailed):
            await client.post(server.url(), b"", b"{}")
        assert len(server.calls) == 1


# -- looking up and connecting ---------------------------------------------------------------


async def test_each_allowed_address_in_turn() -> None:
    """127.0.0.2 refuses (the server listens on 127.0.0.1 only), 10.0.0.5 is never tried."""
    resolver = ScriptedResolver(["10.0.0.5", "127.0.0.2", "127.0.0.1"])
    async with RawServer(answer(OK)) as server, lean(resolver=resolver) as sender:
        outcome = await send(sender, f"http://hooks.test:{server.port}/hook")
        assert outcome.kind == "success", outcome


async def test_lookups_are_cached() -> None:
    resolver = ScriptedResolver(["127.0.0.1"])
    payload = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    async with RawServer(answer(payload)) as server, lean(resolver=resolver) as sender:
        for _ in range(3):
            assert (await send(sender, f"http://hooks.test:{server.port}/")).kind == "success"
        assert server.connections == 3 and resolver.lookups == 1


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        (
            ["10.0.0.5", "169.254.169.254"],
            "blocked: private address (set DISPATCHER_ALLOWED_CIDRS to allow it)",
        ),
        (
            ["fe80::1", "fd00::1"],
            "blocked: link-local address (set DISPATCHER_ALLOWED_CIDRS to allow it)",
        ),  # the first one's reason
        (["not an address"], "DNS lookup failed"),
    ],
)
async def test_names_judged_by_every_address(answers: list[str], error: str) -> None:
    async with lean(resolver=ScriptedResolver(answers), allowed=LOOPBACK[:1]) as sender:
        outcome = await send(sender, "http://hooks.test:9/hook")
        assert outcome.error == error
        assert outcome.kind == ("blocked" if error.startswith("blocked") else "connection_error")


async def test_every_address_refused() -> None:
    resolver = ScriptedResolver(["127.0.0.2", "127.0.0.3"])
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with lean(resolver=resolver) as sender:
        outcome = await send(sender, f"http://hooks.test:{port}/hook")
        assert (outcome.kind, outcome.error) == ("connection_error", "connection refused")


async def test_ipv6() -> None:
    async with RawServer(answer(OK), host="::1") as server:
        async with lean() as sender:
            assert (await send(sender, server.url())).kind == "success"
        async with lean(resolver=ScriptedResolver(["::1"])) as sender:
            assert (await send(sender, f"http://six.test:{server.port}/")).kind == "success"
        async with lean(allowed=LOOPBACK[:1]) as sender:
            assert (await send(sender, server.url())).error == (
                "blocked: loopback address (set DISPATCHER_ALLOWED_CIDRS to allow it)"
            )
        assert server.connections == 2


@contextlib.contextmanager
def black_hole(host: str, port: int) -> Iterator[None]:
    """A listening socket on `host`:`port` that never accepts: its accept queue is filled
    first, after which the kernel drops every SYN, so a connection attempt gets no answer at
    all (neither accepted nor refused), as from an address that black-holes its traffic. On
    loopback only."""
    assert ipaddress.ip_address(host).is_loopback
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    fillers: list[socket.socket] = []
    try:
        listener.bind((host, port))
        listener.listen(0)
        for _ in range(4):  # (a backlog of 0 still queues one or two)
            filler = socket.socket(listener.family)
            filler.setblocking(False)
            filler.connect_ex((host, port))
            fillers.append(filler)
        yield
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_a_black_holed_address_costs_the_happy_eyeballs_delay_not_the_timeout() -> None:
    """The name's first address never answers the connection; the second, tried after
    HAPPY_EYEBALLS_DELAY (RFC 8305), does, well within the timeout."""
    resolver = ScriptedResolver(["10.0.0.5", "127.0.0.2", "127.0.0.1"])  # 10/8: never tried
    async with RawServer(answer(OK)) as server:
        with black_hole("127.0.0.2", server.port):
            async with lean(resolver=resolver, timeout=5.0) as sender:
                outcome = await send(sender, f"http://hooks.test:{server.port}/hook")
    assert outcome.kind == "success", outcome
    assert outcome.elapsed_ms < 2500, outcome  # not the 5 s timeout
    assert server.connections == 1


async def test_only_black_holed_addresses_time_out() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    resolver = ScriptedResolver(["127.0.0.2", "127.0.0.3"])
    with black_hole("127.0.0.2", port), black_hole("127.0.0.3", port):
        async with lean(resolver=resolver, timeout=0.5) as sender:
            outcome = await send(sender, f"http://hooks.test:{port}/hook")
            assert (outcome.kind, outcome.error) == ("timeout", "timeout after 0.5s")
            assert pool(sender).open_connections == 0


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (key, cert)."""
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate[1], certificate[0])
    return context


async def test_tls(certificate: tuple[Path, Path]) -> None:
    async with RawServer(answer(OK), tls=server_tls(certificate)) as server:
        async with lean() as sender:  # the system's trust store: not this certificate
            outcome = await send(sender, server.url())
            assert outcome.error == "TLS certificate verification failed"
        trusting = ssl.create_default_context(cafile=str(certificate[1]))
        client = Http1Client(timeout=2, allowed=LOOPBACK, max_connections=2, ssl_context=trusting)
        try:
            for _ in range(3):
                response = await client.post(server.url(), b"", b"{}")
                assert response.status == 200
        finally:
            await client.close()
        assert server.connections == 1 and len(server.calls) == 3


async def test_tls_to_a_server_that_does_not_speak_it() -> None:
    plain = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"

    async def answer_garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(plain)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with lean() as sender:
            outcome = await send(sender, f"https://127.0.0.1:{port}/hook")
            assert (outcome.kind, outcome.error) == ("connection_error", "TLS handshake failed")
    finally:
        server.close()
        await server.wait_closed()


# -- faults at each stage --------------------------------------------------------------------


async def real_faults(certificate: tuple[Path, Path]) -> list[tuple[str, str | None]]:
    """A real failure at each stage, as (stage, lastError)."""
    seen: list[tuple[str, str | None]] = []
    lookup = ScriptedResolver(error=socket.gaierror(socket.EAI_NONAME, "Name or service"))
    async with lean(resolver=lookup) as sender:
        seen.append(("resolve", (await send(sender, "http://hooks.test/")).error))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with lean() as sender:
        seen.append(("connect", (await send(sender, f"http://127.0.0.1:{port}/")).error))
    async with RawServer(answer(OK), tls=server_tls(certificate)) as server, lean() as sender:
        seen.append(("connect", (await send(sender, server.url())).error))
    async with RawServer(hang, tls=server_tls(certificate)) as server:
        trusting = ssl.create_default_context(cafile=str(certificate[1]))
        client = Http1Client(timeout=0.2, allowed=LOOPBACK, max_connections=1, ssl_context=trusting)
        with pytest.raises(TimeoutError):
            await client.post(server.url(), b"", b"{}")
        await client.close()
    async with RawServer(answer(b"", keep=False)) as server, lean() as sender:
        seen.append(("send", (await send(sender, server.url())).error))
    async with RawServer(answer(MALFORMED["not HTTP"])) as server, lean() as sender:
        seen.append(("read", (await send(sender, server.url())).error))
    cut = ANSWERS["short body"][0]
    async with RawServer(answer(cut, drip=True, keep=False)) as server, lean() as sender:
        seen.append(("read", (await send(sender, server.url())).error))
    async with RawServer(hang) as server, lean(timeout=0.2) as sender:
        seen.append(("read", (await send(sender, server.url())).error))
    return seen


REAL_FAULTS = [
    ("resolve", "DNS lookup failed"),
    ("connect", "connection refused"),
    ("connect", "TLS certificate verification failed"),
    ("send", "connection closed before a response"),
    ("read", "connection error: the response was not valid HTTP"),
    ("read", "response interrupted"),
    ("read", "timeout after 0.2s"),
]


async def test_real_faults_at_each_stage(certificate: tuple[Path, Path]) -> None:
    assert await real_faults(certificate) == REAL_FAULTS


# -- on uvloop, as the worker runs -----------------------------------------------------------


async def on_uvloop(certificate: tuple[Path, Path]) -> None:
    assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    assert await real_faults(certificate) == REAL_FAULTS
    async with RawServer(answer(OK)) as server, lean() as sender:  # the system's lookup
        assert (await send(sender, f"http://localhost:{server.port}/")).kind == "success"
    await test_keep_alive_reuses_one_connection()
    await test_a_request_crossing_the_servers_close_is_sent_once_more()
    await test_a_connection_the_server_closed_while_idle_is_not_used()
    await test_at_most_max_connections_are_open()
    await test_tls(certificate)
    for name, (payload, want) in ANSWERS.items():
        for drip in (False, True):
            script = answer(payload, drip=drip, keep=False)
            async with RawServer(script) as server, lean(timeout=1.0) as sender:
                assert expected(await send(sender, server.url())) == want, name


async def test_on_uvloop(certificate: tuple[Path, Path]) -> None:
    await asyncio.wait_for(asyncio.to_thread(uvloop.run, on_uvloop(certificate)), timeout=60)


def test_messages_are_those_of_the_docs() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "delivery.md").read_text()
    for message in (http1.REFUSED, http1.CERTIFICATE, http1.INVALID, http1.CLOSED):
        assert f"`{message}`" in docs, message


async def test_an_echoed_secret_never_reaches_the_excerpt(receiver: Receiver) -> None:
    """The excerpt of an answer echoing the request's headers keeps
    the rest and none of what was sent in secret (signature, signing secrets, secret header
    values), but only redacts what was secret."""
    from aiohttp import web

    async def echo(request: web.Request) -> web.StreamResponse:
        return web.Response(text="".join(f"{k}: {v}\n" for k, v in request.headers.items()))

    receiver.behaviours["/echo"] = echo
    previous = "whsec_" + "QUJD" * 8
    async with lean(excerpt_bytes=4096) as sender:
        outcome = await sender.send(
            receiver.url("/echo"), "WD1", [SECRET, previous], BODY,
            [("X-Tenant", "acme"), ("Authorization", "Bearer s3cr3t-value")],
            ["Bearer s3cr3t-value"],
        )  # fmt: skip
    assert outcome.succeeded and outcome.response_body is not None
    (request,) = receiver.at("/echo")
    kept = outcome.response_body
    assert "X-Tenant: acme" in kept and "webhook-id: WD1" in kept
    assert "Authorization: [redacted]" in kept
    assert "webhook-signature: [redacted]" in kept
    assert request.headers["webhook-signature"] not in kept
    assert "s3cr3t" not in kept

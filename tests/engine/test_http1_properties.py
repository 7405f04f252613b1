"""Properties of the lean client's answer parser (dispatcher/engine/http1.py), for answers
that hypothesis makes, splits and mutates.

- Whatever the answer, split into whatever pieces the network delivers, the client reads the
  same thing as from the answer in one piece: a split never changes an outcome.
- A well-formed answer (a status, headers, a body framed by Content-Length, chunked or until
  close, interim answers before it) is read as what was written: its status, Retry-After and
  body.
- A mutated answer (bytes flipped, dropped or inserted anywhere) ends either as an answer or as
  a RequestFailed in the recorded words, never as another exception, and never left pending
  once the server has closed.

The pieces are handed to the connection's protocol as the event loop would (`data_received`
per piece, then the server's end of stream), so each example is exact and quick; the
socket-level cases are in test_http1.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.engine import http1
from dispatcher.engine.http1 import Http1Client, RequestFailed

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
WORDS = {
    http1.CLOSED,
    http1.INTERRUPTED,
    http1.INVALID,
}
Read = tuple[str, int | None, str | None, bytes | None]


class _Wire(asyncio.Transport):
    """The transport side of a connection, for a protocol fed by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


async def _read(pieces: list[bytes]) -> Read:
    client = Http1Client(timeout=1, allowed=LOOPBACK, max_connections=1, excerpt_bytes=1 << 17)
    conn = http1._Connection(client, ("http", "127.0.0.1", 80, ""))
    conn.connection_made(_Wire())
    reply = conn.begin()
    for piece in pieces:
        conn.data_received(piece)
    if not conn.closed:
        conn.eof_received()  # the server closes
        conn.connection_lost(None)
    assert reply.done(), "an answer left pending after the server closed"
    await client.close()
    try:
        response = reply.result()
    except RequestFailed as exc:  # (the _Stale kind too: a retry is the pool's business)
        assert str(exc) in WORDS, exc
        return ("failed", None, str(exc), None)
    return ("answer", response.status, response.retry_after, response.excerpt)


def read(pieces: list[bytes]) -> Read:
    return asyncio.run(_read(pieces))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in pairwise(edges) if b > a]


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, Read]:
    """A well-formed answer, and what reading it must give."""
    status = draw(st.sampled_from([200, 201, 202, 204, 301, 400, 404, 429, 500, 503]))
    body = b"" if status == 204 else draw(st.binary(max_size=300))
    retry_after = draw(
        st.none() | st.from_regex(r"[0-9]{1,5}|[A-Za-z]{3}, [0-9 :A-Za-z]{1,25}", fullmatch=True)
    )
    framing = draw(st.sampled_from(["length", "chunked", "until close"]))
    reason = draw(st.sampled_from([b" OK", b" Whatever It Says", b""]))
    eol = draw(st.sampled_from([b"\r\n", b"\n"]))
    lines = [b"HTTP/1.1 %d%b" % (status, reason)]
    extra = draw(
        st.lists(st.from_regex(r"X-[A-Za-z]{1,8}: [ -~]{0,20}", fullmatch=True), max_size=3)
    )
    lines += [line.rstrip().encode() for line in extra]
    if retry_after is not None:
        lines.append(b"Retry-After: " + retry_after.strip().encode())
    payload = body
    if status != 204:
        if framing == "length":
            lines.append(b"Content-Length: %d" % len(body))
        elif framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
            sizes = draw(st.lists(st.integers(1, 64), max_size=8))
            chunks, rest = [], body
            for size in sizes:
                if rest:
                    chunks.append(rest[:size])
                    rest = rest[size:]
            if rest:
                chunks.append(rest)
            payload = b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        else:
            lines.append(b"Connection: close")
    interim = draw(st.sampled_from([b"", b"HTTP/1.1 100 Continue\r\n\r\n"]))
    head = interim + eol.join(lines) + eol + eol
    want_retry = None if retry_after is None else retry_after.strip()
    return head + payload, ("answer", status, want_retry, body)


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(answers(), st.lists(st.integers(0, 10_000), max_size=12))
def test_a_well_formed_answer_is_read_as_written_however_it_is_split(
    answer: tuple[bytes, Read], cuts: list[int]
) -> None:
    data, want = answer
    assert read([data]) == want
    assert read(split(data, cuts)) == want


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(answers())[0])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(["flip", "drop", "insert"]))
        byte = draw(st.sampled_from(list(b"\r\n :;,0aZ-\x00\xff\t")))
        if edit == "insert" or at == len(data):
            data[at:at] = bytes([byte])
        elif edit == "drop":
            del data[at]
        else:
            data[at] = byte
    return bytes(data)


@PROPERTY
@given(mutated(), st.lists(st.integers(0, 10_000), max_size=12))
def test_a_mutated_answer_is_read_the_same_however_it_is_split(
    data: bytes, cuts: list[int]
) -> None:
    whole = read([data])
    assert whole[0] in ("answer", "failed")
    assert read(split(data, cuts)) == whole
    assert read([data[i : i + 1] for i in range(len(data))]) == whole

"""CPU per answer parsed: the engine's own HTTP/1.1 parser (dispatcher/engine/http1.py) and,
when `httptools` is installed, llhttp through it, on the same answers, in turn.

    python -m benchmarks.parse_cost [--count N]

Both are driven as a connection is: one `data_received` per answer, a reply future set when
the answer is complete, its status and Retry-After kept (the pool's part, which does not
change with the parser, is left out). This measured the question of issue #24 ("hand the
framing to llhttp?"); it is not part of `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import ipaddress
import time
from typing import Any

from dispatcher.engine import http1

ANSWERS = {
    "sink 200": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "typical": (
        b"HTTP/1.1 200 OK\r\nDate: Wed, 25 Nov 2026 03:00:00 GMT\r\nServer: nginx\r\n"
        b"Content-Type: application/json\r\nContent-Length: 11\r\n"
        b'Connection: keep-alive\r\n\r\n{"ok":true}'
    ),
    "503 retry": b"HTTP/1.1 503 Busy\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",
}


class _Wire(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def lean(payload: bytes, count: int) -> float:
    loop_allowed = (ipaddress.ip_network("127.0.0.0/8"),)
    client = http1.Http1Client(timeout=1, allowed=loop_allowed, max_connections=1)
    conn = http1._Connection(client, ("http", "127.0.0.1", 80, ""))
    conn.connection_made(_Wire())
    client._release = lambda conn: None  # type: ignore[method-assign]
    started = time.process_time()
    for _ in range(count):
        reply = conn.begin()
        conn.data_received(payload)
        reply.result()
    return (time.process_time() - started) / count * 1e6


class _Llhttp:
    """The least a protocol on httptools needs for the same result."""

    def __init__(self, httptools: Any) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.retry_after: str | None = None
        self.reply: asyncio.Future[tuple[int, str | None]] | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after" and self.retry_after is None:
            self.retry_after = value.decode("utf-8", "surrogateescape").strip()

    def on_message_complete(self) -> None:
        assert self.reply is not None
        self.reply.set_result((self.parser.get_status_code(), self.retry_after))


async def llhttp(payload: bytes, count: int) -> float:
    loop = asyncio.get_running_loop()
    conn = _Llhttp(importlib.import_module("httptools"))
    started = time.process_time()
    for _ in range(count):
        conn.retry_after = None
        conn.reply = reply = loop.create_future()
        conn.parser.feed_data(payload)
        reply.result()
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parse_cost")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    have_llhttp = importlib.util.find_spec("httptools") is not None
    for name, payload in ANSWERS.items():
        best_lean = best_llhttp = float("inf")
        for _ in range(args.rounds):  # in turn
            best_lean = min(best_lean, asyncio.run(lean(payload, args.count)))
            if have_llhttp:
                best_llhttp = min(best_llhttp, asyncio.run(llhttp(payload, args.count)))
        line = f"{name:10s} lean {best_lean:.2f} µs"
        if have_llhttp:
            line += f"  httptools {best_llhttp:.2f} µs"
        print(f"{line}  (µs CPU per answer, best of {args.rounds} x {args.count})")


if __name__ == "__main__":
    main()

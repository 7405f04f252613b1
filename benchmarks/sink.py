"""The receiver the benchmarks send to, run as its own process so that its cost is not ours.

    python -m benchmarks.sink --port P [--mode fast|verify|slow|hang|fail] [--secret S]
                              [--delay SECONDS] [--record]

A hand-written HTTP/1.1 server on uvloop (an `asyncio.Protocol`, no framework): it parses just
enough of each request (request line, Content-Length, webhook-id) to answer as fast as
possible, so that the dispatcher's speed, not the receiver's, is what gets measured. Listens on
127.0.0.1 only.

Modes (the default for every path; a path starting `/mode/<m>/` overrides it per request):

- fast:   200 at once.
- verify: checks every Standard Webhooks signature (`standardwebhooks`) with `--secret`;
          200 when valid, 401 (and counted as `invalid`) when not.
- slow:   200 after `--delay` seconds (default 0.5).
- hang:   never answers; the connection is dropped after `--hang-max` seconds (default 60),
          so nothing waits forever. The client's timeout is what ends the attempt.
- fail:   500 at once.

Control endpoints (never counted): `GET /stats` -> JSON {count, duplicates, distinct, invalid,
first, last, by_status, open_connections}; `POST /reset` clears everything; with `--record`:
`GET /records` -> JSON [[data_id, received_unix_time, path, client_port], ...] (the latency
scenario pairs them with the publish times it noted itself; one machine, so the clocks agree),
and `GET /flow?since=T&exclude=P1,P2` -> JSON {path: first receive time >= T} over the requests
that did not come from the client ports listed (the takeover scenario: when each endpoint
received its first delivery after a kill, not counting what the killed process had sent).
Duplicates are counted per `webhook-id` (a redelivery of one delivery carries the same id).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections import Counter
from typing import Any, cast

import orjson

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
RESPONSES = {
    200: OK,
    401: b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n",
    404: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
    500: b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
}
MODES = ("fast", "verify", "slow", "hang", "fail")
MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.delay: float = args.delay
        self.hang_max: float = args.hang_max
        self.record: bool = args.record
        self.webhook: Any = None
        if args.secret:
            from standardwebhooks.webhooks import Webhook

            self.webhook = Webhook(args.secret)
        self.connections: set[SinkProtocol] = set()
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.duplicates = 0
        self.invalid = 0
        self.first = 0.0
        self.last = 0.0
        self.seen: set[bytes] = set()
        self.by_status: Counter[int] = Counter()
        self.records: list[tuple[str, float, str, int]] = []

    def flow(self, query: bytes) -> dict[str, float]:
        """{path: first receive time >= since}, leaving out requests from `exclude` ports."""
        params = dict(p.partition(b"=")[::2] for p in query.split(b"&") if p)
        since = float(params.get(b"since", b"0"))
        exclude = {int(x) for x in params.get(b"exclude", b"").split(b",") if x}
        first: dict[str, float] = {}
        for _, at, path, port in self.records:
            if at >= since and port not in exclude and path not in first:
                first[path] = at
        return first

    def stats(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "duplicates": self.duplicates,
            "distinct": len(self.seen),
            "invalid": self.invalid,
            "first": self.first,
            "last": self.last,
            "by_status": {str(k): v for k, v in self.by_status.items()},
            "open_connections": len(self.connections),
            "mode": self.mode,
        }


class SinkProtocol(asyncio.Protocol):
    def __init__(self, state: State) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.hang_timer: asyncio.TimerHandle | None = None
        self.peer_port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        with contextlib.suppress(TypeError, IndexError):
            self.peer_port = int(transport.get_extra_info("peername")[1])
        self.state.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        if self.hang_timer is not None:
            self.hang_timer.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        # One request at a time per connection; bounded by what is in the buffer.
        while self.transport is not None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self.transport.close()
                return
            head = bytes(buffer[:end])
            length = 0
            webhook_id = b""
            lines = head.split(b"\r\n")
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                lname = name.strip().lower()
                if lname == b"content-length":
                    length = int(value)
                elif lname == b"webhook-id":
                    webhook_id = value.strip()
            if length > MAX_BODY:
                self.transport.close()
                return
            total = end + 4 + length
            if len(buffer) < total:
                return
            body = bytes(buffer[end + 4 : total])
            del buffer[:total]
            self.request(lines, webhook_id, body)

    def request(self, lines: list[bytes], webhook_id: bytes, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        state = self.state
        method, _, rest = lines[0].partition(b" ")
        target = rest.partition(b" ")[0]
        path, _, query = target.partition(b"?")
        if path == b"/stats":
            self.reply_json(state.stats())
            return
        if path == b"/reset" and method == b"POST":
            state.reset()
            self.reply_json({"reset": True})
            return
        if path == b"/records":
            self.reply_json(state.records)
            return
        if path == b"/flow":
            self.reply_json(state.flow(query))
            return
        now = time.time()
        if not state.count:
            state.first = now
        state.last = now
        state.count += 1
        if webhook_id:
            if webhook_id in state.seen:
                state.duplicates += 1
            else:
                state.seen.add(webhook_id)
        if state.record:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                data_id = orjson.loads(body)["data"]["id"]
                state.records.append((data_id, now, path.decode(errors="replace"), self.peer_port))
        mode = state.mode
        if path.startswith(b"/mode/"):
            mode = path.split(b"/")[2].decode()
        if mode == "fast":
            status = 200
        elif mode == "verify":
            status = self.verify(lines, body)
        elif mode == "fail":
            status = 500
        elif mode == "slow":
            state.by_status[200] += 1
            asyncio.get_running_loop().call_later(state.delay, self.write_later, OK)
            return
        elif mode == "hang":
            # Never answer; drop the connection after hang_max so nothing waits forever.
            state.by_status[0] += 1
            self.hang_timer = asyncio.get_running_loop().call_later(state.hang_max, transport.close)
            return
        else:
            status = 404
        state.by_status[status] += 1
        transport.write(RESPONSES[status])

    def verify(self, lines: list[bytes], body: bytes) -> int:
        state = self.state
        if state.webhook is None:
            state.invalid += 1
            return 401
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().decode().lower()] = value.strip().decode()
        try:
            state.webhook.verify(body, headers)
        except Exception:
            state.invalid += 1
            return 401
        return 200

    def write_later(self, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(payload)

    def reply_json(self, obj: Any) -> None:
        assert self.transport is not None
        body = orjson.dumps(obj)
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )


async def serve(args: argparse.Namespace) -> None:
    state = State(args)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SinkProtocol(state), "127.0.0.1", args.port, backlog=4096, reuse_address=True
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    port = server.sockets[0].getsockname()[1]
    print(f"sink listening on 127.0.0.1:{port} mode={args.mode}", flush=True)
    # Bounded in time: a forgotten sink ends by itself.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=args.max_lifetime)
    server.close()
    for protocol in list(state.connections):
        if protocol.transport is not None:
            protocol.transport.abort()
    await server.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sink", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, default="fast")
    parser.add_argument("--secret", default=None, help="whsec_ secret for --mode verify")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds, for --mode slow")
    parser.add_argument("--hang-max", type=float, default=60.0, help="seconds, for --mode hang")
    parser.add_argument("--record", action="store_true", help="keep (data.id, time) per request")
    parser.add_argument("--max-lifetime", type=float, default=4 * 3600.0, help="seconds")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args))
    except ImportError:  # pragma: no cover
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()

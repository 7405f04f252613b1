"""Slow clients: how long a connection may take to send a request, and how many stay open.

Without bounds, a connection costs the server a file descriptor and a little memory for as
long as its client keeps it open, sending nothing or a byte now and then: 2,000 half-sent
request heads stayed open 90 s, and only the open-file limit bounded them (a "slowloris").
Each connection of a `serve` process is held to four bounds (docs/configuration.md, "Slow
clients"):

- **head**: a request's head (request line and headers) must be complete within
  `DISPATCHER_HEAD_TIMEOUT` seconds of its first byte (of the connection's opening, for its
  first request); else the connection is answered 408 `request_timeout` and closed.
- **body**: its body must have arrived within `DISPATCHER_BODY_TIMEOUT` seconds of the head;
  else the request is answered 408 `request_timeout` (a request that reads its body) and the
  connection closed. A request that has not yet its whole body holds no admission slot while
  it waits for it (api/framework/admission.py), so slow bodies never crowd out other requests.
- **keep-alive idle**: between requests, `DISPATCHER_KEEPALIVE_TIMEOUT` seconds without a
  complete head closes the connection (aiohttp's own keep-alive timer).
- **connections**: at most `DISPATCHER_MAX_CONNECTIONS` open at once. One more evicts the
  connection that has waited longest for a request head (idle or half-sent); when every open
  connection has a request in progress, the new one is closed at once. A flood of slow heads
  thus only ever displaces itself, never a request being served.

All of it lives in the per-connection protocol, below the application: a connection's timers
cost nothing while requests flow, and nothing here reads or parses what the client sends.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from dispatcher import metrics
from dispatcher.api.framework.http import RequestBodyTimeout, ShapedErrorProtocol, ShapedErrorServer
from dispatcher.settings import Settings

log = structlog.get_logger("dispatcher.api")

# What a head that did not arrive in time is answered, before the connection closes. Its
# body is the one error shape; no request id is known (the head never arrived).
_HEAD_TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"Content-Type: application/json\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
_HEAD_TIMEOUT_BODY = (
    b'{"status":408,"code":"request_timeout","title":"Request Timeout",'
    b'"message":"the request head did not arrive within DISPATCHER_HEAD_TIMEOUT","trace":""}'
)


@dataclass(frozen=True)
class ConnectionLimits:
    """The four bounds of a `serve` process's connections (module docstring)."""

    head_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 75.0
    max_connections: int = 1000

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            head_timeout=settings.head_timeout,
            body_timeout=settings.body_timeout,
            keepalive_timeout=settings.keepalive_timeout,
            max_connections=settings.max_connections,
        )


class Connections:
    """One server's open connections: how many, and those waiting for a request head, the
    one that has waited longest first (a dict keeps insertion order)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open = 0
        self.waiting: dict[GuardedProtocol, None] = {}

    def longest_waiting(self, new: GuardedProtocol) -> GuardedProtocol | None:
        """The connection to close to make room for `new`: the one waiting longest for a
        head (never `new`, never one with a request in progress), None when there is none."""
        while self.waiting:
            candidate = next(iter(self.waiting))
            del self.waiting[candidate]
            if candidate is not new and candidate.awaiting_head:
                return candidate
        return None


class GuardedProtocol(ShapedErrorProtocol):
    """The per-connection protocol, held to the bounds of its server's `Connections`."""

    def __init__(self, manager: web.Server, connections: Connections, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._connections = connections
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body: Any = None  # the payload (StreamReader) whose arrival is timed
        self._counted = False
        # From a head's arrival to the end of its answer (or of the last pipelined one's).
        self._serving = False

    @property
    def awaiting_head(self) -> bool:
        """Open and between requests: no head read that is not answered yet."""
        return self.transport is not None and not self._serving

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        connections = self._connections
        connections.open += 1
        self._counted = True
        metrics.API_CONNECTIONS_OPEN.inc()
        if connections.open > connections.limits.max_connections:
            evicted = connections.longest_waiting(self)
            if evicted is None:
                # Every other connection is serving a request: this one gets no room.
                metrics.API_CONNECTIONS_CLOSED.labels("refused").inc()
                self.force_close()
                return
            metrics.API_CONNECTIONS_CLOSED.labels("evicted").inc()
            evicted.force_close()
        # The first request's head is timed from the connection's opening.
        self._arm_head_timer()
        connections.waiting[self] = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._connections.waiting.pop(self, None)
        if self._counted:
            self._counted = False
            self._connections.open -= 1
            metrics.API_CONNECTIONS_OPEN.dec()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if data and self._head_timer is None and not self._serving and waiter and not waiter.done():
            self._arm_head_timer()  # the first byte of a later request's head
        count = self._request_count
        super().data_received(data)
        if self._request_count != count:
            # A head arrived: its timer stops, and its body's starts unless it came with it.
            self._serving = True
            self._cancel_head_timer()
            self._connections.waiting.pop(self, None)
            payload = self._messages[-1][1] if self._messages else None
            if payload is not None and not payload.is_eof():
                self._arm_body_timer(payload)
        if self._body is not None and self._body.is_eof():
            self._cancel_body_timer()

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        answered = await super().finish_response(request, resp, start_time)
        self._serving = bool(self._messages)  # a pipelined head read meanwhile is next
        if self.transport is not None and not self._serving:
            # Between requests again: in line to be evicted, the longest waiting first.
            self._connections.waiting.pop(self, None)
            self._connections.waiting[self] = None
        return answered

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self._loop.call_later(
            self._connections.limits.head_timeout, self._head_timed_out
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _arm_body_timer(self, payload: Any) -> None:
        self._cancel_body_timer()
        self._body = payload
        self._body_timer = self._loop.call_later(
            self._connections.limits.body_timeout, self._body_timed_out
        )

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._body = None

    def _disarm(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.awaiting_head:
            return  # a request is in progress (a pipelined head was already read)
        metrics.API_CONNECTIONS_CLOSED.labels("head_timeout").inc()
        if self.transport is not None:
            body = _HEAD_TIMEOUT_BODY
            self.transport.write(_HEAD_TIMEOUT_ANSWER % (len(body), body))
        self.force_close()

    def _body_timed_out(self) -> None:
        payload, self._body_timer = self._body, None
        self._body = None
        if payload is None or payload.is_eof():
            return
        metrics.API_CONNECTIONS_CLOSED.labels("body_timeout").inc()
        # The request's reads fail now (the error middleware answers 408), and the
        # connection closes once that answer is out; no later request is read from it.
        payload.set_exception(RequestBodyTimeout())
        self.close()
        # A handler that does not read its body (nor answer) must not keep the connection:
        # it is closed for good after one more head timeout.
        self._loop.call_later(self._connections.limits.head_timeout, self._close_if_open)

    def _close_if_open(self) -> None:
        if self.transport is not None:
            self.force_close()


class GuardedServer(ShapedErrorServer):
    """A server whose connections are GuardedProtocols sharing one `Connections`."""

    tracked: Connections

    def __call__(self) -> web.RequestHandler:
        return GuardedProtocol(self, self.tracked, loop=self._loop, **self._kwargs)


def guard_connections(app: web.Application, limits: ConnectionLimits) -> None:
    """Make every server aiohttp builds for `app` (`serve`'s runner, the tests' TestServer) a
    GuardedServer held to `limits`, answering what its parser refuses in the one error shape
    (ShapedErrorProtocol). aiohttp's keep-alive timer is the idle bound.

    Every runner builds its server with the app's `_make_handler`; wrapping that one method on
    this instance is the narrowest place aiohttp 3.14 leaves (`object.__setattr__`: see
    `Application.__setattr__`, which warns about custom attributes in debug mode).
    """
    build = app._make_handler

    def make_handler(**kwargs: Any) -> web.Server:
        kwargs.setdefault("keepalive_timeout", limits.keepalive_timeout)
        guarded = GuardedServer.like(build(**kwargs))
        guarded.tracked = Connections(limits)
        return guarded

    object.__setattr__(app, "_make_handler", make_handler)

"""Backpressure: at most so many API requests in progress per process; past that, a short
wait for a slot, then `503 overloaded` with `Retry-After`, before the body is read. A request
whose body is slow to arrive holds no slot while it waits for it (`Slot`).

Under overload a queue without a bound only makes every answer late (and memory grow); a
refusal at once lets the client (or its load balancer) retry elsewhere or later, while the
requests let in keep their latency. The wait is first come, first served and bounded by
DISPATCHER_ADMISSION_TIMEOUT, so that a brief burst is absorbed instead of refused, and no
request let in has waited longer than that for its slot. The probes and `/metrics` are never
held or refused: an orchestrator must see a busy process as alive and ready (restarting it
would only move its load), and an operator needs its metrics most when it is overloaded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.typedefs import Middleware

from dispatcher import metrics
from dispatcher.api.framework.http import BODY_WAITS, Handler
from dispatcher.errors import Overloaded
from dispatcher.store import database

# Never counted, never held, never refused.
EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class Admission:
    """At most `limit` requests in progress; a request past it waits at most `timeout`
    seconds (0: not at all) for one to finish, in arrival order, then is refused."""

    def __init__(self, limit: int, timeout: float) -> None:
        self.limit = limit
        self.timeout = timeout
        self.in_progress = 0
        # Requests let in that wait, without a slot, for a body their client is slow to send.
        self.awaiting_body = 0
        # Each waiter's future gets its result when a finishing request hands it its slot.
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def enter(self) -> None:
        """Take a slot, or raise Overloaded."""
        if self.in_progress < self.limit and not self._waiters:
            self.in_progress += 1
            metrics.API_REQUESTS_IN_PROGRESS.inc()
            return
        if self.timeout <= 0:
            raise self._refusal()
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                await waiter
        except BaseException as exc:
            # Cancelling the wait (the timeout, or the client going away) cancels `waiter` too,
            # unless a finishing request handed it a slot first.
            handed = waiter.done() and not waiter.cancelled()
            if not handed:
                with contextlib.suppress(ValueError):  # unless `leave` dropped it already
                    self._waiters.remove(waiter)
                if isinstance(exc, TimeoutError):
                    raise self._refusal() from None
                raise
            if isinstance(exc, TimeoutError):
                return  # handed a slot just as its time ran out: it is in
            self.leave()  # it held a slot already: pass it on
            raise

    def leave(self) -> None:
        """Give the slot back: to the first waiter (which then holds it), or to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            # A waiter cancelled (timed out) but not yet resumed is passed over: it leaves.
            if not waiter.done():
                waiter.set_result(None)
                return
        self.in_progress -= 1
        metrics.API_REQUESTS_IN_PROGRESS.dec()

    def _refusal(self) -> Overloaded:
        return Overloaded(
            f"the service has {self.limit} requests in progress, its bound; retry shortly",
            reason="requests",
        )


ADMISSION = web.AppKey("admission", Admission)


def admission_middleware(admission: Admission) -> Middleware:
    """The middleware holding requests to `admission`. It runs inside the error middleware
    (the refusal has the one error shape, a request id, a log line and its metrics) and
    before anything reads the body or the database, so that a refusal costs little and
    changes nothing."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        database.start_request()
        if request.path in EXEMPT_PATHS:
            return await handler(request)
        slot = Slot(admission)
        await slot.take()
        request.setdefault(BODY_WAITS, []).append(slot.released)
        try:
            return await handler(request)
        finally:
            slot.give_back()

    return middleware


class Slot:
    """One request's place in `Admission`: taken as the request starts, given back while it
    waits for a body its client is slow to send (a slot bounds work in progress, and waiting
    on a client is none: a hundred slow bodies would otherwise refuse every other request),
    taken again once the body is in (or refused then, before anything was written)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._held = False

    async def take(self) -> None:
        await self._admission.enter()
        self._held = True

    def give_back(self) -> None:
        if self._held:
            self._held = False
            self._admission.leave()

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        self.give_back()
        self._admission.awaiting_body += 1
        try:
            yield
        finally:
            self._admission.awaiting_body -= 1
        await self.take()

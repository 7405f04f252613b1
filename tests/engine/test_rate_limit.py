"""Rate limits: requests per second to one endpoint, held across engine processes that share
the database, measured where it matters: when each request reaches a real receiver.

The bound (docs/delivery.md, "Rate limits"): after the first second, no 1-second window holds
more than ceil(1.1 x rateLimit) requests, the first second at most twice that; and waiting for
the limit is not an attempt.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from bisect import bisect_left
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import SystemClock
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, deliveries, subscribe
from tests.processes import FAST_LEASE, start
from tests.receiver import EngineFactory, Receiver

RATE = 20
SECONDS = 10.0


def stamped(arrivals: list[float]) -> Any:
    """Note when each request arrived (monotonic seconds), then answer 200."""

    async def respond(request: web.Request) -> web.StreamResponse:
        arrivals.append(time.monotonic())
        return web.Response(status=200)

    return respond


def busiest_window(arrivals: list[float], since: float, until: float) -> int:
    """The most arrivals in any 1-second window [t, t + 1) starting in [since, until): the
    busiest one starts at an arrival (or at `since`)."""
    starts = [since, *(t for t in arrivals if since <= t < until)]
    return max(bisect_left(arrivals, t + 1.0) - bisect_left(arrivals, t) for t in starts)


async def test_the_limit_holds_across_two_engine_processes(
    database_url: str, client: TestClient[Any, Any], ws: Workspace, receiver: Receiver,
    db: Database,
) -> None:  # fmt: skip
    arrivals: list[float] = []
    receiver.behaviours["/limited"] = stamped(arrivals)
    hook = await subscribe(client, ws, receiver.url("/limited"), rateLimit=RATE)
    assert hook["rateLimit"] == RATE
    await bulk_publish(db, ws, int(RATE * SECONDS * 1.5))
    workers = [await start(database_url, "worker", **FAST_LEASE) for _ in range(2)]
    try:
        await wait_for(
            lambda: len(arrivals) > 1 and arrivals[-1] - arrivals[0] >= SECONDS + 1.5,
            within=60,
            message=f"{SECONDS + 1.5:g} s of requests",
        )
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(proc.wait(), timeout=30) for proc in workers]
    assert codes == [0, 0]
    async with db.acquire() as conn:  # both engines sent to it (each keeps rollups of its own)
        assert await conn.fetchval(
            "SELECT count(DISTINCT engine) FROM webhook_stats_minutes WHERE webhook_id = $1",
            hook["id"],
        ) == 2  # fmt: skip
    seen = sorted(arrivals)
    first = seen[0]
    bound = -(-11 * RATE // 10)  # ceil(1.1 x RATE), in integers
    in_first_second = busiest_window(seen, first, first + 1.0)
    after_it = busiest_window(seen, first + 1.0, first + SECONDS)
    total = bisect_left(seen, first + SECONDS)
    print(
        f"\nrateLimit {RATE}, two engine processes: {total} requests in {SECONDS:g} s, "
        f"busiest 1-s window {after_it} (bound {bound}), first second {in_first_second}"
    )
    assert in_first_second <= 2 * bound
    assert after_it <= bound
    assert abs(total - RATE * SECONDS) <= 0.1 * RATE * SECONDS


async def test_waiting_for_the_limit_is_not_an_attempt(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory,
) -> None:  # fmt: skip
    arrivals: list[float] = []
    receiver.behaviours["/limited"] = stamped(arrivals)
    hook = await subscribe(client, ws, receiver.url("/limited"), rateLimit=1)
    await bulk_publish(db, ws, 3)
    await make_engine(clock_=SystemClock())
    await wait_for(lambda: len(arrivals) == 1, message="the first request")

    async def one_recorded() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return bool(sum(d["attempts"] for d in rows) == 1)

    await wait_for(one_recorded, message="the first attempt recorded")
    waiting = [d for d in await deliveries(client, ws, hook["id"]) if d["attempts"] == 0]
    assert len(waiting) == 2 and all(d["status"] == "pending" for d in waiting)
    async with db.acquire() as conn:
        assert await conn.fetchval(
            "SELECT failing_since FROM webhooks WHERE id = $1", hook["id"]
        ) is None  # fmt: skip
        assert await conn.fetchval("SELECT count(*) FROM delivery_attempts") == 1
    await wait_for(lambda: len(arrivals) == 3, within=10, message="the other two, a second apart")
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    # No sooner than the limit allows (less the bucket's 30 ms), and no later than it requires
    # (with room for a busy machine).
    assert all(0.9 <= gap <= 1.5 for gap in gaps), gaps

    async def all_delivered() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return all(d["status"] == "delivered" and d["attempts"] == 1 for d in rows)

    await wait_for(all_delivered, message="each delivered with one attempt")
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM delivery_attempts") == 3


async def test_a_limited_endpoint_does_not_slow_the_others(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory,
) -> None:  # fmt: skip
    limited = await subscribe(client, ws, receiver.url("/limited"), rateLimit=2)
    # The limited endpoint's backlog is older: it sits first in due order.
    await bulk_publish(db, ws, 300)
    await subscribe(client, ws, receiver.url("/free"))
    await bulk_publish(db, ws, 200)
    await make_engine(clock_=SystemClock(), claim_batch_size=50)
    await wait_for(lambda: len(receiver.at("/free")) == 200, message="the free endpoint drained")
    assert len(receiver.at("/limited")) <= 20
    async with db.acquire() as conn:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM deliveries WHERE webhook_id = $1 AND status = 'pending' "
            "AND attempts = 0",
            limited["id"],
        )
    assert waiting >= 480  # of its 500: still waiting, and no attempt counted for them


async def test_a_test_delivery_counts_against_the_limit(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory,
) -> None:  # fmt: skip
    arrivals: list[float] = []
    receiver.behaviours["/limited"] = stamped(arrivals)
    hook = await subscribe(client, ws, receiver.url("/limited"), rateLimit=1)
    for _ in range(2):
        resp = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
        assert resp.status == 202
    await make_engine(clock_=SystemClock())
    await wait_for(lambda: len(arrivals) == 2, within=10, message="both tests sent")
    assert arrivals[1] - arrivals[0] >= 0.9


async def test_a_grant_sent_late_is_handed_back_and_no_window_holds_more(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory,
) -> None:  # fmt: skip
    """Two engines share a limit of 5 a second; one of them pauses for 1.5 s
    between its claims and its sends (as a stalled process does), then sends what it was
    granted meanwhile. At the receiver, after the first second, no 1-second window may hold
    more than ceil(1.1 x 5) = 6 requests: the late grants are handed back, not sent, and
    every delivery still arrives, once."""
    rate, events = 5, 30
    arrivals: list[float] = []
    receiver.behaviours["/limited"] = stamped(arrivals)
    hook = await subscribe(client, ws, receiver.url("/limited"), rateLimit=rate)
    await bulk_publish(db, ws, events)
    paused = await make_engine(clock_=SystemClock())
    await make_engine(clock_=SystemClock())
    loop = asyncio.get_running_loop()
    pause: dict[str, float] = {}

    async def stall(claimed: Any) -> None:
        """From the engine's first second on, a pause of 1.5 s: every attempt it claimed
        meanwhile waits for its end."""
        if not pause:
            pause["until"] = loop.time() + 1.0 + 1.5
            pause["from"] = loop.time() + 1.0
        if pause["from"] <= loop.time() < pause["until"]:
            await asyncio.sleep(pause["until"] - loop.time())  # the stall being simulated

    paused.before_send = stall
    await wait_for(lambda: len(arrivals) >= events, within=30, message="every delivery sent")

    async def all_delivered() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return len(rows) == events and all(d["status"] == "delivered" for d in rows)

    await wait_for(all_delivered, message="each delivered")
    seen = sorted(arrivals)
    bound = -(-11 * rate // 10)
    busiest = busiest_window(seen, seen[0] + 1.0, seen[-1])
    print(f"\nbusiest window {busiest} (bound {bound}), handed back {paused.grants_expired}")
    assert paused.grants_expired > 0  # the pause fell on grants
    assert busiest <= bound
    assert len(arrivals) == events  # none sent twice

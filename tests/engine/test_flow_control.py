"""Flow control from the receiver (docs/delivery.md, "Flow control"), against a real receiver
on loopback: a 429 or 503 with Retry-After makes the next attempt wait for it and is never held
against the endpoint; a 429 lowers the endpoint's effective rate, shared by every engine
through the database, and accepted answers bring it back."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY

from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import (
    attempted,
    delivered_count,
    deliveries,
    get_json,
    publish,
    subscribe,
)
from tests.receiver import EngineFactory, Receiver, answer, sequence

NO_DISABLE = 10**8


def slow_down(retry_after: str | None = None, status: int = 429) -> Any:
    return answer(status, None if retry_after is None else {"Retry-After": retry_after})


async def effective_rate(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> Any:
    return (await get_json(client, ws, f"/v1/webhooks/{hook_id}/stats"))["effectiveRateLimit"]


def gauge(hook_id: str) -> float | None:
    return REGISTRY.get_sample_value("dispatcher_endpoint_effective_rate", {"webhook": hook_id})


async def delivered(db: Database, n: int) -> bool:
    return await delivered_count(db) >= n


async def until_rate(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, rate: float | None
) -> None:
    async def there() -> bool:
        return bool(await effective_rate(client, ws, hook_id) == rate)

    await wait_for(there, message=f"effective rate {rate}")


async def test_the_next_attempt_waits_for_retry_after(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    in_20s = format_datetime(clock.now() + timedelta(seconds=20), usegmt=True)
    receiver.behaviours["/seconds"] = slow_down("30")
    receiver.behaviours["/date"] = slow_down(in_20s, status=503)
    receiver.behaviours["/huge"] = slow_down("999999999")
    hooks = {
        path: await subscribe(client, ws, receiver.url(path), retrySchedule=[5, 60])
        for path in ("/seconds", "/date", "/huge")
    }
    await publish(client, ws)
    engine = await make_engine(disable_after=NO_DISABLE)
    waits = {}
    for path, hook in hooks.items():
        delivery = await attempted(client, ws, hook["id"], 1, engine)
        assert delivery["responseStatus"] in (429, 503)  # recorded as what it was
        next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
        waits[path] = (next_at - datetime.fromisoformat(delivery["createdAt"])).total_seconds()
    assert 29 < waits["/seconds"] < 32  # Retry-After over the schedule's 5 s
    assert 18 < waits["/date"] < 22  # an HTTP date (to the second)
    assert 59 < waits["/huge"] < 62  # capped at the schedule's largest delay

    # The next attempt comes when it asked, not at the schedule's 5 s.
    receiver.behaviours["/seconds"] = answer(200)
    clock.advance(10)
    engine.poke()
    delivery = await attempted(client, ws, hooks["/seconds"]["id"], 1, engine)
    assert delivery["attempts"] == 1
    clock.advance(25)
    delivery = await attempted(client, ws, hooks["/seconds"]["id"], 2, engine)
    assert delivery["status"] == "delivered"


async def test_answers_that_ask_for_time_never_disable_the_endpoint(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    receiver.behaviours["/paced"] = slow_down("1")
    receiver.behaviours["/unavailable"] = slow_down("1", status=503)
    receiver.behaviours["/bare"] = slow_down(None)  # no Retry-After: an HTTP error
    paced = await subscribe(client, ws, receiver.url("/paced"))
    unavailable = await subscribe(client, ws, receiver.url("/unavailable"))
    bare = await subscribe(client, ws, receiver.url("/bare"))
    for n in range(3):
        await publish(client, ws, f"CT{n}")
    # One attempt each, and no patience: the first give-up disables a failing endpoint.
    await make_engine(retry_schedule=(), disable_after=0.0)

    async def settled() -> bool:
        found = [
            d for h in (paced, unavailable, bare) for d in await deliveries(client, ws, h["id"])
        ]
        return all(d["status"] == "failed" for d in found)

    await wait_for(settled, message="every delivery given up")
    for hook in (paced, unavailable):
        after = await get_json(client, ws, f"/v1/webhooks/{hook['id']}")
        assert (after["disabledAt"], after["disabledReason"]) == (None, None)
        figures = await get_json(client, ws, f"/v1/webhooks/{hook['id']}/stats")
        assert figures["attempts"]["http_error"] == 3  # recorded as what they were
    after = await get_json(client, ws, f"/v1/webhooks/{bare['id']}")
    assert after["disabledReason"] == "failing"
    async with db.acquire() as conn:  # their failure clocks never started
        clocks = await conn.fetch(
            "SELECT failing_since FROM webhooks WHERE id = ANY($1)",
            [paced["id"], unavailable["id"]],
        )
    assert [row["failing_since"] for row in clocks] == [None, None]


async def test_the_rate_drops_on_429_and_recovers_when_the_receiver_accepts(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
    db: Database,
) -> None:
    receiver.behaviours["/hook"] = sequence(slow_down("1"), answer(200))
    hook = await subscribe(client, ws, receiver.url(), rateLimit=100, retrySchedule=[1])
    assert await effective_rate(client, ws, hook["id"]) == 100
    await publish(client, ws)
    engine = await make_engine(disable_after=NO_DISABLE)
    await until_rate(client, ws, hook["id"], 50.0)  # halved
    assert gauge(hook["id"]) == 50.0

    # Accepted answers, a second apart: back by 100 / 20 a second, to the rate limit.
    seen = [50.0]
    for n in range(20):
        clock.advance(1.0)
        await publish(client, ws, f"CT{n}")
        engine.poke()
        await wait_for(lambda n=n: delivered(db, n + 1), message="delivered")
        rate = await effective_rate(client, ws, hook["id"])
        seen.append(rate)
        if rate == 100:
            break
    assert seen[-1] == 100  # its rateLimit again: no longer adapted
    assert seen == sorted(seen) and len(seen) >= 6  # climbed in steps
    assert gauge(hook["id"]) is None  # the series goes once recovered


async def test_an_endpoint_without_a_rate_limit_gets_one_while_it_answers_429(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
    db: Database,
) -> None:
    receiver.behaviours["/hook"] = sequence(slow_down(None), answer(200))
    hook = await subscribe(client, ws, receiver.url(), retrySchedule=[1])
    assert await effective_rate(client, ws, hook["id"]) is None
    await publish(client, ws)
    engine = await make_engine(disable_after=NO_DISABLE)
    # Half its throughput so far (one attempt in a minute or two), at least 1 a second.
    await until_rate(client, ws, hook["id"], 1.0)

    async def buckets() -> int:
        async with db.acquire() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM webhook_rates"))

    assert await buckets() == 1  # the claim's token bucket runs at it
    clock.advance(1.0)
    await attempted(client, ws, hook["id"], 2, engine)
    await until_rate(client, ws, hook["id"], None)  # recovered: unrestricted again
    assert await buckets() == 0


async def test_two_engines_share_the_adapted_rate(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    receiver.behaviours["/hook"] = slow_down("1")
    hook = await subscribe(client, ws, receiver.url(), rateLimit=4)
    await publish(client, ws)
    first = await make_engine(disable_after=NO_DISABLE)
    await until_rate(client, ws, hook["id"], 2.0)
    await first.stop()

    arrivals: list[float] = []

    async def stamped(request: web.Request) -> web.StreamResponse:
        arrivals.append(time.monotonic())
        return web.Response(status=200)

    receiver.behaviours["/hook"] = stamped
    for n in range(8):
        await publish(client, ws, f"CT{n}")
    await make_engine(disable_after=NO_DISABLE)  # another engine: only the database is shared
    await wait_for(lambda: delivered(db, 8), message="8 delivered")
    # At the adapted 2 a second (a request every 0.5 s: 3.5 s for 8), not the rateLimit's 4
    # (1.75 s).
    assert arrivals[-1] - arrivals[0] >= 2.5
    # Its accepted answers move the shared rate back up (its claims saw it adapted).
    assert 2.0 < await effective_rate(client, ws, hook["id"]) < 4

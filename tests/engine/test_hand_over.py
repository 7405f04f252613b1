"""Slots handed on (docs/delivery.md, "Slots handed on"): with a backlog, a finished attempt's
slot goes to its endpoint's next due delivery without waiting for a claim, and no limit is
ever exceeded for it: an endpoint's own, across engines, lowered meanwhile, or a rate."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import SystemClock
from dispatcher.engine.recorder import Recorder
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, slow_ok, subscribe
from tests.receiver import EngineFactory, Receiver
from tests.records import attempt_result


async def test_a_backlog_flows_through_handed_slots_within_the_limit_of_two_engines(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = slow_ok(0.005)  # requests overlap: the slots stay busy
    await subscribe(client, ws, receiver.url(), maxConcurrency=4)
    await bulk_publish(db, ws, 300)
    engines = [await make_engine(), await make_engine()]
    await wait_for(lambda: len(receiver.at("/hook")) >= 300, within=60, message="300 received")
    # Most deliveries went out through handed slots, never more than 4 at once in all.
    assert sum(engine.slots_handed for engine in engines) >= 150
    assert receiver.peak["/hook"] <= 4
    # Each delivery once: 300 distinct webhook-ids, and every delivery recorded delivered.
    ids = [request.headers["webhook-id"] for request in receiver.at("/hook")]
    assert len(ids) == len(set(ids)) == 300

    async def all_delivered() -> bool:
        async with db.acquire() as conn:
            n = await conn.fetchval("SELECT count(*) FROM deliveries WHERE status = 'delivered'")
        return bool(n == 300)

    await wait_for(all_delivered, within=30, message="300 recorded delivered")
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM delivery_queue") == 0


async def test_a_lowered_limit_holds_for_handed_slots(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = slow_ok(0.02)
    hook = await subscribe(client, ws, receiver.url(), maxConcurrency=6)
    await bulk_publish(db, ws, 600)
    engine = await make_engine()
    await wait_for(lambda: engine.slots_handed >= 20, within=30, message="slots handed on")
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"maxConcurrency": 2}, headers=ws.headers
    )
    assert resp.status == 200, await resp.text()
    # What was in flight under the old limit finishes; then no more than 2 at once.
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) <= 2, within=30)
    received = len(receiver.at("/hook"))
    await wait_for(lambda: len(receiver.at("/hook")) >= received + 12, within=30)
    handed = engine.slots_handed
    receiver.peak["/hook"] = receiver.in_flight["/hook"]
    await wait_for(lambda: len(receiver.at("/hook")) >= received + 60, within=30)
    assert engine.slots_handed > handed  # still handing slots on, within the new limit
    assert receiver.peak["/hook"] <= 2


async def test_a_rate_limited_endpoint_hands_no_slot_on(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    await subscribe(client, ws, receiver.url(), rateLimit=40)
    await bulk_publish(db, ws, 40)
    engine = await make_engine()
    await wait_for(lambda: len(receiver.at("/hook")) >= 40, within=30, message="40 received")
    assert engine.slots_handed == 0  # its bucket, at the claim, says when each may go


async def test_a_full_buffer_behind_an_unanswered_hand_over_waits_for_its_answer(
    db: Database,
) -> None:
    """The recorder writes a handed result only once its hand-over has answered; until then it
    waits for that answer, even with a full buffer behind it (it once spun there, holding the
    event loop, so the answer could never come)."""
    recorder = Recorder(
        db, owner="engine-test", clock=SystemClock(), disable_after=3600, max_batch=2
    )
    now = datetime.now(UTC)
    results = [attempt_result("WHtest", now, delivery_id=f"WDtest{i}") for i in range(3)]
    for result in results:
        recorder.add(result)
    recorder.hand(results[0].id)  # its hand-over is still to answer
    running = asyncio.create_task(recorder.run())
    try:
        ticks = 0
        for _ in range(20):  # the loop keeps turning meanwhile
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 20 and recorder.pending == 3 and recorder.held_back
        recorder.handed([results[0].id], unused=[])
        # Written now (none of these deliveries exists: the record keeps nothing of them).
        await wait_for(lambda: recorder.pending == 0, within=10, message="the buffer written")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

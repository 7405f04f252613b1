"""Per-endpoint limits, isolation of slow endpoints, several engines, crashes, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import structlog.testing
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import SystemClock
from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store import queue
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, deliveries, publish, slow_ok, subscribe
from tests.receiver import EngineFactory, Receiver


async def test_max_concurrency_is_respected(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = receiver.hang
    await subscribe(client, ws, receiver.url(), maxConcurrency=3)
    await bulk_publish(db, ws, 20)
    engine = await make_engine()
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) == 3)
    # Give the engine every chance to exceed the limit, then check it did not.
    for _ in range(5):
        engine.poke()
        await engine.claim_once()
    assert receiver.peak["/hook"] == 3
    assert engine.in_flight == 3
    receiver.release.set()
    await wait_for(lambda: len(receiver.at("/hook")) == 20, message="all 20 delivered")
    assert receiver.peak["/hook"] <= 3


async def test_slow_endpoint_does_not_delay_a_fast_one(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/slow"] = receiver.hang
    slow = await subscribe(client, ws, receiver.url("/slow"), maxConcurrency=2)
    fast = await subscribe(client, ws, receiver.url("/fast"))
    # The slow endpoint's backlog is older, so it is first in due order.
    await client.patch(f"/v1/webhooks/{fast['id']}", json={"enabled": False}, headers=ws.headers)
    await bulk_publish(db, ws, 300)
    await client.patch(f"/v1/webhooks/{fast['id']}", json={"enabled": True}, headers=ws.headers)
    await bulk_publish(db, ws, 50)
    await make_engine(claim_batch_size=20)
    await wait_for(lambda: len(receiver.at("/fast")) == 50, message="fast endpoint drained")
    assert receiver.in_flight["/slow"] == 2  # still hanging: it held only its own slots
    rows = await deliveries(client, ws, slow["id"])
    assert sum(1 for d in rows if d["status"] == "pending") == len(rows)


async def test_two_engines_send_each_delivery_once(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    for i in range(4):
        await subscribe(client, ws, receiver.url(f"/h{i}"), maxConcurrency=50)
    await bulk_publish(db, ws, 150)
    await make_engine(claim_batch_size=25)
    await make_engine(claim_batch_size=25)
    await wait_for(lambda: len(receiver.requests) >= 600, message="600 deliveries")
    ids = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(ids) == 600
    assert max(ids.values()) == 1

    async def all_recorded() -> bool:
        async with db.acquire() as conn:
            return bool(
                await conn.fetchval("SELECT count(*) FROM deliveries WHERE status = 'delivered'")
                == 600
            )

    await wait_for(all_recorded)


async def test_a_dead_engines_leases_are_taken_over(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database, clock: FakeClock,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url())
    await bulk_publish(db, ws, 5)
    doomed = await make_engine(heartbeat_timeout=1.0)
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) == 5)
    await hard_kill(doomed)
    del receiver.behaviours["/hook"]
    # A second engine cannot take the rows while the dead one is not known to be dead...
    rescuer = await make_engine(heartbeat_timeout=1.0)
    await rescuer.claim_once()
    assert rescuer.in_flight == 0
    # ...and takes them within seconds once it has stopped beating (database time: the
    # test's clock does not move).
    await wait_for(lambda: len(receiver.requests) == 10, within=10, message="5 re-sent")
    first, second = receiver.requests[:5], receiver.requests[5:]
    assert {r.headers["webhook-id"] for r in first} == {r.headers["webhook-id"] for r in second}

    async def delivered() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return all(d["status"] == "delivered" and d["attempts"] == 1 for d in rows)

    await wait_for(delivered)


async def test_take_overs_at_start_up_are_logged(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = receiver.hang
    await subscribe(client, ws, receiver.url())
    await bulk_publish(db, ws, 5)
    doomed = await make_engine(heartbeat_timeout=1.0)
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) == 5)
    await hard_kill(doomed)
    async with db.acquire() as conn:  # silent for long: dead at the next engine's first beat
        await conn.execute(
            "UPDATE dispatcher_engines SET beat_at = now() - interval '1 hour' WHERE owner = $1",
            doomed.owner,
        )
    with structlog.testing.capture_logs() as logs:
        await make_engine(heartbeat_timeout=1.0)
        # Logged by the start itself, before any later beat.
        took = [e for e in logs if e["event"] == "engine.took_over"]
    assert took == [
        {"event": "engine.took_over", "log_level": "info", "count": 5,
         "owners": {doomed.owner: 5}}
    ]  # fmt: skip
    receiver.release.set()


async def hard_kill(engine: Engine) -> None:
    """Stop an engine as a crash would: no result written, no lease released."""
    for task in [*engine._tasks, *engine._in_flight.values()]:
        task.cancel()
    for task in [*engine._tasks, *engine._in_flight.values()]:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await engine.sender.close()
    engine.running = False


async def test_graceful_stop_releases_what_it_could_not_finish(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/slow"] = receiver.hang
    await subscribe(client, ws, receiver.url("/slow"))
    await subscribe(client, ws, receiver.url("/fast"))
    await bulk_publish(db, ws, 3)
    engine = await make_engine(shutdown_timeout=0.3)
    await wait_for(lambda: len(receiver.at("/fast")) == 3 and receiver.in_flight.get("/slow") == 3)
    await engine.stop()
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT d.status, q.lease_owner, q.due_at <= now() AS due, d.attempts, w.url "
            "FROM deliveries d JOIN webhooks w ON w.id = d.webhook_id "
            "LEFT JOIN delivery_queue q ON q.delivery_id = d.id"
        )
    fast = [r for r in rows if r["url"].endswith("/fast")]
    slow = [r for r in rows if r["url"].endswith("/slow")]
    assert {r["status"] for r in fast} == {"delivered"}
    # Unfinished: released, due again at once, attempt not counted.
    assert all(
        r["status"] == "pending" and r["lease_owner"] is None and r["due"] and r["attempts"] == 0
        for r in slow
    )


async def test_notify_wakes_an_idle_engine(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    await subscribe(client, ws, receiver.url())
    engine = await make_engine(poll_interval=60.0)
    assert engine.listener is not None
    await wait_for(lambda: engine.listener is not None and engine.listener.connected)
    await publish(client, ws)
    # Polling would take a minute; NOTIFY brings it in well under the deadline.
    await wait_for(lambda: len(receiver.requests) == 1, within=5.0, message="woken by NOTIFY")


async def test_outbox_work_starts_without_a_notify(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """The SQL outbox function sends no NOTIFY (it would serialise the caller's commits); an
    idle engine's probe of the queue finds the work anyway, long before a full poll."""
    await subscribe(client, ws, receiver.url())
    engine = await make_engine(poll_interval=60.0, start=False)
    engine.listener = None  # no NOTIFY at all: only the probe can find the work
    await engine.start()
    await bulk_publish(db, ws, 1)
    await wait_for(lambda: len(receiver.requests) == 1, within=5.0, message="found by the probe")


async def test_a_backlog_at_the_head_does_not_starve_the_endpoints_behind_it(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """A hanging endpoint's backlog fills the first rows of the due order, beyond a claim's
    window; the endpoint published to afterwards still gets its deliveries at once."""
    receiver.behaviours["/stuck"] = receiver.hang
    await subscribe(client, ws, receiver.url("/stuck"), maxConcurrency=1)
    await bulk_publish(db, ws, 1_500)  # more than the window of a 50-row claim (1,000)
    healthy = await subscribe(client, ws, receiver.url("/fine"))
    for i in range(5):
        await publish(client, ws, f"late-{i}")
    await make_engine(claim_batch_size=50)
    await wait_for(lambda: len(receiver.at("/fine")) == 5, within=10, message="healthy flows")
    assert receiver.peak.get("/stuck", 0) == 1
    assert healthy["id"]


# A busy database: every statement that updates queue rows (a claim's lease, among others)
# takes 10 ms more before its transaction can commit, holding its locks meanwhile.
SLOW_CLAIMS = """
CREATE FUNCTION test_slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.01); RETURN NULL; END $$;
CREATE TRIGGER test_slow_claim AFTER UPDATE ON delivery_queue
FOR EACH STATEMENT EXECUTE FUNCTION test_slow_claim();
"""


async def test_a_fifo_endpoints_limit_holds_across_two_engines(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, database_url: str,
    settings: Settings, db: Database,
) -> None:  # fmt: skip
    """Claims by two engines at the same moment must not each take the free slots of a fifo
    endpoint (a claim there reads more rows than its slots, to park lanes in bulk, and one
    head per lane is a candidate; another claim skips the rows it holds and finds other
    lanes' heads): the receiver never sees more than maxConcurrency at once, with many lanes
    (every delivery the head of its own) always ready to take a slot. The engines claim 5
    and 50 rows at a time: the second reads past the rows the first holds."""
    receiver.behaviours["/fifo"] = slow_ok(0.005)
    await subscribe(client, ws, receiver.url("/fifo"), ordering="fifo", maxConcurrency=3)
    events = 300
    async with db.transaction() as conn:
        await conn.execute(SLOW_CLAIMS)
        await conn.execute(  # one lane per event
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', 'CT' || g), NULL, 'L' || g) FROM generate_series(1, $2) g",
            ws.id,
            events,
        )
    pools = [await Database.open(database_url, min_size=1, max_size=4) for _ in range(2)]
    engines = [
        Engine(pool, settings.with_changes(claim_batch_size=batch), SystemClock(), rand=lambda: 0.5)
        for pool, batch in zip(pools, (5, 50), strict=True)
    ]
    try:
        await asyncio.gather(*(engine.start() for engine in engines))
        await wait_for(lambda: len(receiver.requests) >= events, within=60, message="drained")
    finally:
        for engine in engines:
            await engine.stop()
        for pool in pools:
            await pool.close()
    assert receiver.peak["/fifo"] == 3


async def test_claims_at_the_same_moment_lease_a_fifo_endpoints_slots_once(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, database_url: str,
    db: Database,
) -> None:  # fmt: skip
    """Two engines' claims sent together, round after round, at a fifo endpoint whose lanes
    are known (each claim then finds heads it can take): together they lease exactly its
    free slots, whether one claim runs while the other holds its rows, or starts from a
    snapshot taken before the other committed."""
    hook = await subscribe(client, ws, receiver.url("/fifo"), ordering="fifo", maxConcurrency=3)
    async with db.transaction() as conn:  # 500 lanes of one delivery each
        await conn.execute(
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', 'CT' || g), NULL, 'L' || g) FROM generate_series(1, 500) g",
            ws.id,
        )
    pools = [await Database.open(database_url, min_size=1, max_size=2) for _ in range(2)]
    leased: list[int] = []
    try:
        for _ in range(30):
            now = datetime.now(UTC)
            await asyncio.gather(*(
                queue.claim(pool, owner=f"engine-{i}", now=now, limit=50, default_concurrency=10)
                for i, pool in enumerate(pools)
            ))  # fmt: skip
            async with db.acquire() as conn:
                leased.append(
                    await conn.fetchval(
                        "SELECT count(*) FROM delivery_queue WHERE webhook_id = $1 "
                        "AND lease_owner IS NOT NULL",
                        hook["id"],
                    )
                )
                # The requests are over: every lease back, due (the lanes stay, known).
                await conn.execute(
                    "UPDATE delivery_queue SET lease_owner = NULL, due_at = now() "
                    "WHERE lease_owner IS NOT NULL"
                )
    finally:
        for pool in pools:
            await pool.close()
    assert leased == [3] * 30


async def test_every_task_an_engine_runs_is_named(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """A task dump taken in a hang or a leak says which of the engine's tasks each one is: its
    loops by role, an attempt by its delivery."""
    receiver.behaviours["/hook"] = receiver.hang
    await subscribe(client, ws, receiver.url())
    await bulk_publish(db, ws, 2)
    engine = await make_engine()
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) == 2)
    loops = {task.get_name() for task in engine.tasks}
    assert {"engine-recorder", "engine-claim-loop", "engine-heartbeat"} <= loops
    assert not any(name.startswith("Task-") for name in loops)
    attempts = {task.get_name() for task in engine._in_flight.values()}
    assert attempts == {f"engine-attempt {delivery_id}" for delivery_id in engine._in_flight}
    receiver.release.set()

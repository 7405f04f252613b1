"""Crashes and restarts of real engine processes in the middle of a drain.

Each test is bounded: a few hundred deliveries, short leases, deadlines on every wait.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, delivered_count, slow_ok, webhooks_for
from tests.processes import FAST_LEASE, start
from tests.receiver import Receiver


async def leased_ids(db: Database) -> set[str]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT delivery_id AS id FROM delivery_queue WHERE lease_owner IS NOT NULL"
        )
    return {r["id"] for r in rows}


async def test_kill_nine_mid_drain_loses_nothing(
    database_url: str, db: Database, ws: Workspace, receiver: Receiver
) -> None:
    await webhooks_for(db, ws, receiver, 4)
    for i in range(1, 5):
        receiver.behaviours[f"/h{i}"] = slow_ok(0.01)
    total = 4 * 150
    await bulk_publish(db, ws, 150)
    in_flight_at_kills: set[str] = set()
    kills = 0
    for _ in range(3):
        proc = await start(database_url, "worker", **FAST_LEASE)
        before = len(receiver.requests)
        await wait_for(lambda b=before: len(receiver.requests) >= b + 60, within=30,
                       message="the engine is sending")  # fmt: skip
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        kills += 1
        # Frozen by the kill: the rows it held are exactly those whose results are unknown.
        in_flight_at_kills |= await leased_ids(db)
    survivor = await start(database_url, "worker", **FAST_LEASE)
    try:

        async def all_delivered() -> bool:
            return await delivered_count(db) == total

        await wait_for(all_delivered, within=60, message="every delivery delivered")
    finally:
        survivor.send_signal(signal.SIGTERM)
        await asyncio.wait_for(survivor.wait(), timeout=30)
    received = Counter(r.headers["webhook-id"] for r in receiver.requests)
    async with db.acquire() as conn:
        ids = {r["id"] for r in await conn.fetch("SELECT id FROM deliveries")}
    assert set(received) == ids  # none lost
    duplicates = {d for d, n in received.items() if n > 1}
    assert duplicates <= in_flight_at_kills  # only what was in flight at a kill
    # Never more requests in flight at an endpoint than its maxConcurrency (20), kills or not.
    assert max(receiver.peak.values()) <= 20, receiver.peak
    print(f"\nkill -9 x{kills}: {total} delivered, {len(duplicates)} duplicates "
          f"(in flight at the kills: {len(in_flight_at_kills)})")  # fmt: skip
    assert survivor.returncode == 0


async def test_sigterm_under_load_then_restart(
    database_url: str, db: Database, ws: Workspace, receiver: Receiver
) -> None:
    await webhooks_for(db, ws, receiver, 2)
    for i in (1, 2):
        receiver.behaviours[f"/h{i}"] = slow_ok(0.05)
    await bulk_publish(db, ws, 200)
    proc = await start(database_url, "worker", **FAST_LEASE, DISPATCHER_SHUTDOWN_TIMEOUT="5")
    await wait_for(lambda: len(receiver.requests) >= 50, within=30)
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    # Everything it held is finished or released: nothing waits for a lease to expire.
    assert await leased_ids(db) == set()
    delivered_before = await delivered_count(db)
    assert delivered_before < 400
    again = await start(database_url, "worker", **FAST_LEASE)
    try:

        async def done() -> bool:
            return await delivered_count(db) == 400

        await wait_for(done, within=60)
    finally:
        again.send_signal(signal.SIGTERM)
        await asyncio.wait_for(again.wait(), timeout=30)
    received = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(received) == 400
    assert max(received.values()) == 1  # graceful: no duplicates at all

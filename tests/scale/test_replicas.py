"""Three engine processes on one database: without faults, every delivery arrives once."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, delivered_count, slow_ok, webhooks_for
from tests.processes import FAST_LEASE, start
from tests.receiver import Receiver


async def test_three_engines_deliver_each_exactly_once(
    database_url: str, db: Database, ws: Workspace, receiver: Receiver
) -> None:
    await webhooks_for(db, ws, receiver, 6)
    for i in range(1, 7):
        receiver.behaviours[f"/h{i}"] = slow_ok(0.002)
    await bulk_publish(db, ws, 150)
    total = 6 * 150
    engines = [
        await start(database_url, "worker", **FAST_LEASE, DISPATCHER_CLAIM_BATCH_SIZE="20")
        for _ in range(3)
    ]
    try:

        async def done() -> bool:
            return await delivered_count(db) == total

        await wait_for(done, within=90, message="all deliveries by three engines")
    finally:
        for proc in engines:
            if proc.returncode is not None:
                assert proc.stderr is not None
                raise AssertionError((await proc.stderr.read()).decode()[-3000:])
            proc.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(proc.wait(), timeout=30) for proc in engines]
    if codes != [0, 0, 0]:
        failed = [proc for proc in engines if proc.returncode != 0]
        assert failed[0].stderr is not None
        raise AssertionError(
            f"exit codes {codes}: " + (await failed[0].stderr.read()).decode()[-3000:]
        )
    received = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(received) == total
    assert max(received.values()) == 1, [d for d, n in received.items() if n > 1][:5]
    async with db.acquire() as conn:
        owners = await conn.fetchval("SELECT count(*) FROM deliveries WHERE attempts <> 1")
    assert owners == 0

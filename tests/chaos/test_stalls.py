"""An engine that stalls inside a transaction (paused by SIGSTOP, or its link to Postgres
partitioned), as the chaos run found it: its backend sits "idle in transaction" holding the row
locks of a record. The other engine must keep beating (never wait for those locks), the stalled
engine's endpoints must flow again within a bounded time, as after a kill, and the healthy
engine must never be taken for dead (which would send its deliveries twice)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter

import pytest

from dispatcher.store.database import Database
from tests.chaos.forwarder import Forwarder
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, delivered_count, slow_ok, webhooks_for
from tests.processes import Worker
from tests.receiver import Receiver

HEARTBEAT_TIMEOUT = 2.0
STALL_ENV = {
    "DISPATCHER_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
    "DISPATCHER_REQUEST_TIMEOUT": "5",
    "DISPATCHER_POLL_INTERVAL": "0.1",
    "DISPATCHER_LOG_LEVEL": "info",
}
# How soon a stalled engine's leases are all back, at most: it counts as dead after the
# heartbeat timeout, Postgres ends its transaction after as long (the locked rows), and a
# beat (every timeout / 3) hands back what is free then; plus room for a loaded machine.
FLOWS_AGAIN_WITHIN = 2 * HEARTBEAT_TIMEOUT + 4.0

# A session idle in a transaction that has written attempts: a record's, holding its rows.
RECORD_IDLE_IN_TRANSACTION = """
SELECT a.pid, a.state_change FROM pg_stat_activity a
WHERE a.state = 'idle in transaction' AND a.application_name = 'dispatcher'
  AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
              WHERE l.pid = a.pid AND c.relname = 'delivery_attempts')
"""


# Whether a record has written its attempts and waits for a lock: the test's hold (below).
RECORD_WAITING = """
SELECT EXISTS (
    SELECT 1 FROM pg_stat_activity a
    WHERE a.application_name = 'dispatcher' AND a.wait_event_type = 'Lock'
      AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                  WHERE l.pid = a.pid AND l.granted AND c.relname = 'delivery_attempts'))
"""
# The test's hold on one engine's records: its rows of the hour rollups (every record adds to
# them after writing its attempts; each engine has rows of its own), for its webhooks and the
# hours about now, written or locked in a transaction the test keeps open, then rolls back.
HOLD_ENGINES_RECORDS = """
INSERT INTO webhook_stats_hours AS r (webhook_id, hour, engine, success, http_error, timeout,
                                      connection_error, blocked, delivered, failed)
SELECT w.id, h.hour, $2, 0, 0, 0, 0, 0, 0, 0
FROM webhooks w,
     LATERAL (SELECT date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                     + make_interval(hours => n) AS hour
              FROM generate_series(-1, 1) n) h
WHERE w.workspace_id = $1
ON CONFLICT (webhook_id, hour, engine) DO UPDATE SET success = r.success
"""


async def record_stalled(db: Database) -> bool:
    """Whether a session stays idle inside a record's transaction (the same one, unmoved,
    for 0.3 s: a live engine's records take milliseconds)."""
    async with db.acquire() as conn:
        first = {
            (r["pid"], r["state_change"]) for r in await conn.fetch(RECORD_IDLE_IN_TRANSACTION)
        }
    if not first:
        return False
    await asyncio.sleep(0.3)  # the condition itself: unmoved for this long
    async with db.acquire() as conn:
        later = {
            (r["pid"], r["state_change"]) for r in await conn.fetch(RECORD_IDLE_IN_TRANSACTION)
        }
    return bool(first & later)


async def record_waiting(db: Database) -> bool:
    async with db.acquire() as conn:
        return bool(await conn.fetchval(RECORD_WAITING))


async def _beats(db: Database, owner: str) -> bool:
    return await beat_age(db, owner) < 1.0


async def leases_of(db: Database, owner: str) -> set[str]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT delivery_id FROM delivery_queue WHERE lease_owner = $1", owner
        )
    return {r["delivery_id"] for r in rows}


async def beat_age(db: Database, owner: str) -> float:
    async with db.acquire() as conn:
        age = await conn.fetchval(
            "SELECT extract(epoch FROM now() - beat_at) FROM dispatcher_engines WHERE owner = $1",
            owner,
        )
    return float("inf") if age is None else float(age)


@pytest.mark.parametrize("stall", ["sigstop", "partition"])
async def test_a_stalled_engine_never_stops_the_others(
    stall: str,
    database_url: str,
    db: Database,
    ws: Workspace,
    receiver: Receiver,
    forwarder: Forwarder,
) -> None:
    paths = [f"/h{i}" for i in range(1, 5)]
    await webhooks_for(db, ws, receiver, len(paths))
    for path in paths:
        receiver.behaviours[path] = slow_ok(0.25)
    total = len(paths) * 1000
    await bulk_publish(db, ws, 1000)
    # The engine that stalls; a partition is only on its link (the forwarder).
    stalled = await Worker.start(forwarder.url if stall == "partition" else database_url,
                                 **STALL_ENV)  # fmt: skip
    healthy: Worker | None = None
    try:
        stalled_owner = await stalled.owner()

        def freeze() -> None:
            if stall == "sigstop":
                stalled.proc.send_signal(signal.SIGSTOP)
            else:
                forwarder.stall()

        def thaw() -> None:
            if stall == "sigstop":
                stalled.proc.send_signal(signal.SIGCONT)
            else:
                forwarder.resume()

        # Stall it inside a record's transaction (holding rows a take-over would want): the
        # case that froze the other engine's heartbeat. Caught there by design, not by chance:
        # the test holds the engine's records at their rollups (it runs alone until then, so
        # it has work for certain) until one waits there; the other engine starts; then the
        # test stalls the engine and lets go, and the record completes its statement and sits
        # idle in its transaction, its rows locked.
        async with db.acquire() as conn:
            hold = conn.transaction()
            await hold.start()
            try:
                await conn.execute(HOLD_ENGINES_RECORDS, ws.id, stalled_owner)
                await wait_for(lambda: record_waiting(db), within=30,
                               message="the engine's record waiting")  # fmt: skip
                healthy = await Worker.start(database_url, **STALL_ENV)
                healthy_owner = await healthy.owner()
                await wait_for(lambda: _beats(db, healthy_owner), within=30,
                               message="the other engine beating")  # fmt: skip
                freeze()
            finally:
                await hold.rollback()
        await wait_for(lambda: record_stalled(db), within=5, message="the record stalled")
        stalled_at = time.monotonic()
        held = await leases_of(db, stalled_owner)  # what may be sent twice: its leases
        assert held

        # During the stall: the healthy engine beats throughout, and the stalled engine's
        # leases all come back within the bound.
        worst_age = 0.0
        back_after: float | None = None
        while time.monotonic() - stalled_at < FLOWS_AGAIN_WITHIN + HEARTBEAT_TIMEOUT:
            worst_age = max(worst_age, await beat_age(db, healthy_owner))
            if back_after is None and not await leases_of(db, stalled_owner):
                back_after = time.monotonic() - stalled_at
            await asyncio.sleep(0.1)  # a sampling period, not a synchronisation
        assert worst_age < HEARTBEAT_TIMEOUT, f"the healthy engine went {worst_age:.1f} s unbeaten"
        assert back_after is not None and back_after <= FLOWS_AGAIN_WITHIN, back_after

        # And every endpoint flows again while the engine is still stalled: its backlog
        # drains (everything is sent by the healthy engine alone, the stalled one's share too).
        async def sent_without_it() -> bool:
            return len(set(r.headers["webhook-id"] for r in receiver.requests)) == total

        await wait_for(sent_without_it, within=60, message="every delivery sent, stall or not")
        thaw()

        async def all_delivered() -> bool:
            return await delivered_count(db) == total

        await wait_for(all_delivered, within=90, message="every delivery delivered")
    finally:
        forwarder.resume()
        codes = (await stalled.stop(), await healthy.stop() if healthy is not None else -1)
    received = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(received) == total
    duplicates = {d for d, n in received.items() if n > 1}
    # Only what the stalled engine held can go twice; never a delivery of the healthy one.
    assert duplicates <= held, len(duplicates - held)
    assert not healthy.events("engine.heartbeat_resumed")
    took_over = healthy.events("engine.took_over")
    assert any(stalled_owner in event["owners"] for event in took_over), took_over
    assert codes == (0, 0)
    print(f"\n{stall}: leases back after {back_after:.1f} s, healthy beat age at most "
          f"{worst_age:.2f} s, {len(duplicates)} duplicates of {len(held)} held")  # fmt: skip

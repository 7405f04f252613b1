"""Every transaction that locks webhooks rows and queue rows takes them in one order
(docs/delivery.md, "Lock order"), so none deadlocks with another: the recorders of two engines
(failure clocks, disabling gone and failing endpoints, operational events whose deliveries
lock their webhooks for the foreign key) against the API disabling, enabling and changing the
same webhooks, all at once, in a loop. The chaos run saw one deadlock between the recorder and
a disable (retried, nothing lost); here every deadlock Postgres detects in the test's database
is counted."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import asyncpg
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import SystemClock
from dispatcher.domain.events import OPERATIONAL_TYPES
from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, subscribe
from tests.receiver import Receiver

WEBHOOKS = 6
SECONDS = 8.0


def mixed(rand: random.Random) -> Any:
    """Answer 200, 500 or 410 (gone: the recorder disables the endpoint) at random."""

    async def respond(request: web.Request) -> web.StreamResponse:
        return web.Response(status=rand.choice((200, 200, 500, 500, 410)))

    return respond


async def deadlocks(database_url: str) -> int:
    """Deadlocks Postgres detected in the test's database. A backend reports its count when it
    ends: call once the pools are closed (it waits until no other session is left)."""
    conn = await asyncpg.connect(database_url)
    try:

        async def alone() -> bool:
            return not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

        await wait_for(alone, message="every other session gone")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(
            await conn.fetchval(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await conn.close()


async def test_the_recorder_and_the_api_never_deadlock_over_webhooks(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    settings: Settings, database_url: str,
) -> None:  # fmt: skip
    rand = random.Random(23)
    hooks = []
    for i in range(WEBHOOKS):
        receiver.behaviours[f"/h{i}"] = mixed(rand)
        hooks.append(
            await subscribe(
                client, ws, receiver.url(f"/h{i}"),
                events=["contact.updated", *sorted(OPERATIONAL_TYPES)],
            )
        )  # fmt: skip
    # Two engines (two recorders), one attempt each (a failure gives up: delivery.exhausted,
    # and the endpoint is disabled as failing at once; a 410 disables it as gone).
    pool = await Database.open(database_url, min_size=1, max_size=10)
    engine_settings = settings.with_changes(retry_schedule=(), disable_after=0.0)
    engines = [Engine(pool, engine_settings, SystemClock()) for _ in range(2)]
    for engine in engines:
        await engine.start()
    answers: Counter[int] = Counter()
    loop = asyncio.get_running_loop()
    until = loop.time() + SECONDS

    async def publishing() -> None:
        while loop.time() < until:
            await bulk_publish(db, ws, 20)
            await asyncio.sleep(0.01)  # a publisher's pace, not a synchronisation

    async def changing(seed: int) -> None:
        """Disable, enable, change: each a transaction that locks the webhook first."""
        mine = random.Random(seed)
        while loop.time() < until:
            hook = mine.choice(hooks)
            change = mine.choice(({"enabled": False}, {"enabled": True}, {"maxConcurrency": 5}))
            resp = await client.patch(f"/v1/webhooks/{hook['id']}", json=change, headers=ws.headers)
            answers[resp.status] += 1

    async def retrying(seed: int) -> None:
        """Retry deliveries as they are attempted and recorded (a queue row, then its
        history row)."""
        mine = random.Random(seed)
        while loop.time() < until:
            hook = mine.choice(hooks)
            resp = await client.get(
                f"/v1/webhooks/{hook['id']}/deliveries?limit=20", headers=ws.headers
            )
            for delivery in (await resp.json())["data"][:5]:
                retried = await client.post(
                    f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/retry",
                    headers=ws.headers,
                )
                retries[retried.status] += 1

    retries: Counter[int] = Counter()
    try:
        await asyncio.gather(
            publishing(),
            *(changing(seed) for seed in range(3)),
            *(retrying(seed) for seed in range(10, 12)),
        )
    finally:
        for engine in engines:
            await engine.stop()
        await pool.close()
    await db.close()  # the API's sessions: each reports its deadlocks as it ends
    assert set(answers) == {200}, answers
    assert set(retries) <= {202, 409}, retries  # 409: in flight, or its webhook disabled
    assert retries[202] > 0
    assert await deadlocks(database_url) == 0


async def test_a_retry_during_a_record_waits_for_it_without_a_deadlock(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    database_url: str,
) -> None:  # fmt: skip
    """A record holds its delivery's queue row, then writes its history row; a retry of that
    delivery sent meanwhile must wait for the queue row without holding the history row."""
    hook = await subscribe(client, ws, receiver.url("/h"))
    await bulk_publish(db, ws, 1)
    record = await asyncpg.connect(database_url)
    try:
        tx = record.transaction()
        await tx.start()
        delivery_id = await record.fetchval(  # as the record statement locks it
            "SELECT delivery_id FROM delivery_queue FOR UPDATE"
        )
        retry = asyncio.create_task(
            client.post(
                f"/v1/webhooks/{hook['id']}/deliveries/{delivery_id}/retry", headers=ws.headers
            )
        )

        async def retry_waits() -> bool:
            return bool(
                await record.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
            )

        await wait_for(retry_waits, message="the retry waiting for a lock")
        # The record's next write: the history row (a deadlock here, were the retry holding it).
        await record.execute(
            "UPDATE deliveries SET attempts = attempts + 1 WHERE id = $1", delivery_id
        )
        await tx.commit()
        answer = await retry
        assert answer.status == 202, await answer.text()
    finally:
        await record.close()

"""A quiet idle: one poller per database finds the work no NOTIFY announces.

The engines here never poll on their own (`poll_interval` is a minute): an outbox publish, a
retry coming due, reach the receiver only because the one engine holding the poller's lock
probed the queue and woke the others, or because that engine went away and another took the
lock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiohttp.test_utils import TestClient
from standardwebhooks.webhooks import Webhook

from dispatcher.domain.clock import SystemClock
from dispatcher.engine.worker import Engine
from dispatcher.store.database import Database
from dispatcher.store.notifications import POLLER_LOCK
from dispatcher.store.queue import DueMark
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import subscribe
from tests.receiver import EngineFactory, Receiver, answer, sequence

IDLE = {"poll_interval": 60.0, "heartbeat_timeout": 1.0}  # no full claim within any test


async def outbox_publish(db: Database, ws: Workspace, data_id: str) -> None:
    """One event through the SQL outbox function, as an application would: no NOTIFY."""
    async with db.transaction() as conn:
        await conn.execute(
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', $2::text))",
            ws.id,
            data_id,
        )


async def idle_engines(make_engine: EngineFactory, n: int) -> list[Engine]:
    """n engines on the system clock (the database's `now()` dates outbox rows), once one of
    them is the poller."""
    engines = [await make_engine(clock_=SystemClock(), **IDLE) for _ in range(n)]
    await wait_for(lambda: sum(e.polling for e in engines) == 1, message="one poller")
    return engines


async def poller_session(db: Database) -> int | None:
    """The backend pid of the session that holds the poller's lock, if any."""
    async with db.acquire() as conn:
        pid: int | None = await conn.fetchval(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = $1 AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            POLLER_LOCK & 0xFFFFFFFF,
        )
    return pid


def received(receiver: Receiver, data_id: str) -> list[Any]:
    return [r for r in receiver.requests if orjson.loads(r.body)["data"]["id"] == data_id]


async def test_an_outbox_publish_reaches_the_receiver_through_the_one_poller(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    hook = await subscribe(client, ws, receiver.url())
    engines = await idle_engines(make_engine, 3)
    await outbox_publish(db, ws, "CT-outbox")
    await wait_for(lambda: len(receiver.requests) == 1, within=5.0, message="the delivery")
    (request,) = receiver.requests
    verified = Webhook(hook["secret"]).verify(request.body, request.headers)
    assert verified["data"]["id"] == "CT-outbox"
    assert sum(e.polling for e in engines) == 1  # still one poller, and only one


async def test_stopping_the_poller_lets_another_take_over(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    await subscribe(client, ws, receiver.url())
    engines = await idle_engines(make_engine, 2)
    (poller,) = [e for e in engines if e.polling]
    (other,) = [e for e in engines if not e.polling]
    await poller.stop()
    await wait_for(lambda: other.polling, within=5.0, message="the other engine to poll")
    await outbox_publish(db, ws, "CT-after-stop")
    await wait_for(
        lambda: bool(received(receiver, "CT-after-stop")), within=5.0, message="delivery"
    )


async def test_a_poller_whose_session_dies_is_replaced(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """The lock lives with the poller's session: when that session ends (its process died,
    its connection was cut), the lock is free and an engine takes it within a beat."""
    await subscribe(client, ws, receiver.url())
    engines = await idle_engines(make_engine, 2)
    holder = await poller_session(db)
    assert holder is not None
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", holder)

    async def replaced() -> bool:
        return await poller_session(db) not in (None, holder)

    # Another session holds the lock (either engine's: the one cut off reconnects and
    # competes too), and one engine, only one, knows itself the poller.
    await wait_for(replaced, within=10.0, message="a new poller's session")
    await wait_for(lambda: sum(e.polling for e in engines) == 1, message="one poller")
    await outbox_publish(db, ws, "CT-after-kill")
    await wait_for(
        lambda: bool(received(receiver, "CT-after-kill")), within=5.0, message="delivery"
    )


async def test_a_retry_coming_due_is_picked_up(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    receiver.behaviours["/hook"] = sequence(answer(500), answer(200))
    await subscribe(client, ws, receiver.url())
    engines = [
        await make_engine(clock_=SystemClock(), retry_schedule=(0.5,), **IDLE) for _ in range(2)
    ]
    await wait_for(lambda: sum(e.polling for e in engines) == 1, message="one poller")
    await outbox_publish(db, ws, "CT-retry")
    await wait_for(lambda: len(receiver.requests) == 2, within=5.0, message="the retry")
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]

    async def delivered() -> bool:
        async with db.acquire() as conn:
            row = await conn.fetchrow("SELECT status, attempts FROM deliveries")
        return row is not None and (row["status"], row["attempts"]) == ("delivered", 2)

    await wait_for(delivered, within=5.0, message="delivered at the second attempt")


def test_the_poller_announces_only_work_that_became_due() -> None:
    """A backlog nobody can claim now (saturated, rate-limited endpoints) is announced once,
    not at every probe; more rows, or a newer one, are announced again."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    later = t + timedelta(milliseconds=5)
    cases = [
        (DueMark(0, None), None, False),  # nothing due
        (DueMark(1, t), None, True),  # the first probe that sees work
        (DueMark(1, t), DueMark(0, None), True),  # work after none
        (DueMark(3, t), DueMark(3, t), False),  # the same backlog, still waiting
        (DueMark(2, t), DueMark(3, t), False),  # being drained
        (DueMark(4, t), DueMark(3, t), True),  # a late commit, due before the newest
        (DueMark(100, later), DueMark(100, t), True),  # at the cap: a newer row
        (DueMark(3, later), DueMark(3, t), True),  # one claimed, one newer came
    ]
    for mark, previous, expected in cases:
        assert mark.announces(previous) is expected, (mark, previous)
